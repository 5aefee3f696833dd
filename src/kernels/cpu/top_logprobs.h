// CPU kernel of ops::top_logprobs (also the reference for the CUDA twin): per row of log-softmaxed
// values, the chosen token's logprob and the k best (id, value) pairs.
#pragma once

#include <cmath>
#include <cstdint>

namespace rlm::cpu {

// The order of candidates, shared with the CUDA twin: larger value first, equal values (-0 == +0)
// by the lower id, NaN after every number (NaNs among themselves by the lower id). It is a strict
// total order on (value, id) pairs, so the top-k is unique and the twins agree exactly.
inline bool logprob_before(float va, int32_t ia, float vb, int32_t ib) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// logprobs: f32 [n, vocab] (row stride ld); tokens: i32 [n]. Writes chosen[r] =
// logprobs[r][tokens[r]] (NaN when the token is outside [0, vocab); ops::top_logprobs rejects
// such tokens for CPU tensors), and top_ids/top_values: [n, k] contiguous, the k first
// candidates of each row in logprob_before order (k <= vocab).
void top_logprobs(const float* logprobs, int64_t n, int64_t vocab, int64_t ld, const int32_t* tokens, int64_t k,
                  float* chosen, int32_t* top_ids, float* top_values);

}  // namespace rlm::cpu
