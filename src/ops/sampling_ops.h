// Sampling-side ops that keep the logits on their device: logit penalties and the logprobs
// returned to clients. The host builds plain per-row data (PenaltyBatch) and validates it; the
// kernels only read it, so a step's penalties and logprobs need no host synchronisation (overlap
// scheduling keeps running for such requests).
#pragma once

#include <utility>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/penalties.h"

namespace rlm::ops {

// One row's penalties (cpu::PenaltyRow, shared with the kernels): repetition (Hugging Face: a logit
// of a token seen in the prompt or output is divided by the penalty when > 0, else multiplied, once
// per distinct token; > 0, finite, 1: off), then frequency and presence (OpenAI: minus frequency *
// count + presence for a token found count > 0 times among the output tokens; finite, 0: off);
// prompt_len: the first prompt_len tokens of the row's list are prompt tokens; pending_slot: a
// request slot whose entry in the future-token table is one more output token (overlap
// scheduling: sampled by a launched step, not seen by the host yet), -1: none.
using PenaltyRow = cpu::PenaltyRow;

// One row's OpenAI logit_bias: (token id, value added to its logit), ids distinct.
using LogitBias = std::vector<std::pair<int32_t, float>>;

// The rows of one apply_penalties call: settings, token lists and logit biases (host memory, CSR
// layout).
struct PenaltyBatch {
  std::vector<PenaltyRow> rows;            // [n]
  std::vector<int32_t> token_ids;          // row r: token_ids[token_offsets[r] .. token_offsets[r + 1])
  std::vector<int32_t> token_offsets{0};   // [n + 1]
  std::vector<int32_t> bias_ids;           // row r: bias_ids/bias_values[bias_offsets[r] .. bias_offsets[r + 1])
  std::vector<float> bias_values;
  std::vector<int32_t> bias_offsets{0};    // [n + 1]

  // Appends a row whose list is `prompt` then `output` (prompt_len = prompt.size()) and its bias.
  void add_row(PenaltyRow row, const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
               const LogitBias& bias = {});
  // True when some row changes a logit.
  bool any_active() const;
};

// Applies each row's penalties, then adds its logit bias, in place (one pass over the rows).   logits: f32 [n, vocab] (unit last stride), CPU or CUDA;
// future_tokens: i32 [max_requests] contiguous on the logits' device (the runner's future-token
// table; may be undefined when no row has a pending slot). Token ids, offsets and pending slots are
// checked on the host (rlm::Error naming the row; bias ids must be distinct within a row, inside
// [0, vocab), with finite values); the table token is read where it lives and
// skipped when outside [0, vocab) (a token the sampler wrote is always inside). Same arithmetic on
// both devices (one rounding per operation): the CUDA result is bit-identical to the CPU one.
void apply_penalties(const Tensor& logits, const PenaltyBatch& batch, const Tensor& future_tokens);

// Grammar-constrained decoding: sets logits[rows[j]][t] = -inf for every token t whose bit is 0 in
// row j of the bitmask (bit t % 32 of word t / 32), in place.
//   logits: f32 [n, vocab] (unit last stride); bitmask: i32 [m, words] contiguous with words >=
//   ceil(vocab / 32); rows: i32 [m] contiguous, distinct logits rows in [0, n). All on one device
//   (CPU or CUDA); on CUDA the rows are checked on the host before upload (the Sampler builds them).
void apply_token_bitmask(const Tensor& logits, const Tensor& bitmask, const Tensor& rows);

// Logprobs of the sampled tokens and the k best alternatives of every row.
//   logprobs: f32 [n, vocab] (log-softmaxed; unit last stride); tokens: i32 [n] contiguous (the
//   sampled tokens); chosen: f32 [n] contiguous, chosen[r] = logprobs[r][tokens[r]];
//   top_ids: i32 [n, k], top_values: f32 [n, k], contiguous, k <= vocab (k = 0 allowed): per row
//   the k best (id, value) pairs, larger value first, equal values by the lower id, NaN after every
//   number. All on one device. CPU tokens outside [0, vocab) are an rlm::Error naming the row; on
//   CUDA (where they cannot be read without a sync) such a row's chosen value is NaN.
void top_logprobs(const Tensor& logprobs, const Tensor& tokens, const Tensor& chosen, const Tensor& top_ids,
                  const Tensor& top_values);

}  // namespace rlm::ops
