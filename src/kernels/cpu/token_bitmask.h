// CPU kernel of ops::apply_token_bitmask (also the reference for the CUDA twin): grammar-constrained
// decoding's per-row masks over the vocabulary, applied to rows of f32 logits in place. A token
// whose bit is 0 gets -inf (never sampled, probability 0); allowed tokens keep their logit.
#pragma once

#include <cstdint>

namespace rlm::cpu {

// logits: f32 [*, vocab] with row stride ld; bitmask: int32 [m, words] contiguous, words >=
// ceil(vocab / 32), bit (t % 32) of word t / 32 of row j is token t of logits row rows[j]; rows:
// [m] distinct logits rows (checked by the op).
void apply_token_bitmask(float* logits, int64_t vocab, int64_t ld, const int32_t* bitmask, int64_t words,
                         const int32_t* rows, int64_t m);

}  // namespace rlm::cpu
