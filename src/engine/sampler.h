// Sampler: turns a step's logits into tokens — logprobs of the model's distribution, logit
// penalties and logit_bias (one pass), then temperature / top-k / top-p / min-p sampling — all on the logits' device through
// the ops:: kernels (CPU or CUDA). Only the tokens and the small logprob arrays come back to the
// host, and only when read: a launched step's tokens stay on the device, where the runner's
// future-token table picks them up for the step launched after it (overlap scheduling).
//
// Every path from prompt to token samples here: the scheduler's ModelStepExecutor (serving,
// `radixlm generate` / `chat`, bench offline) and the static-batch tools (bench one-batch).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/async_download.h"
#include "core/tensor.h"
#include "ops/ops.h"
#include "ops/sampling_ops.h"

namespace rlm {

// The logprob of a sampled token and the best alternatives at its position.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the top-k alternatives, best first
};

struct SampleResult {
  int32_t token = 0;
  std::optional<TokenLogprob> logprob;  // when the row asked for logprobs
};

// One row of logits to sample.
struct SampleRow {
  ops::SamplingRow sampling;  // temperature, top-k/p, min-p, seed and the token's step in its request
  // Repetition / frequency / presence penalties; pending_slot as in ops::PenaltyRow (a request
  // slot whose future-token table entry is one more output token, -1: none).
  ops::PenaltyRow penalty;
  // The request's tokens, read by an active penalty (then both are set); not owned.
  const std::vector<int32_t>* prompt_ids = nullptr;
  const std::vector<int32_t>* output_ids = nullptr;
  int32_t logprobs = -1;  // -1: none; 0: the sampled token's; k > 0: also the k best alternatives
  const ops::LogitBias* logit_bias = nullptr;  // added after the penalties; null or empty: none; not owned

  // A greedy row (argmax) without penalties or logprobs.
  static SampleRow greedy();
};

// Logprobs left on the device: per row, one token's logprob and the k best alternatives.
struct DeviceLogprobs {
  Tensor chosen;      // f32 [rows]; undefined when there are none
  Tensor top_ids;     // i32 [rows, k]
  Tensor top_values;  // f32 [rows, k]

  // Queues ops::top_logprobs over `logprobs` (f32 [rows, vocab], log-softmaxed) for `tokens`
  // (i32 [rows]), keeping k alternatives per row.
  static DeviceLogprobs queue(const Tensor& logprobs, const Tensor& tokens, int64_t k);
  // Copies them to the host (waits for the device); the result's row() reads one row.
  DeviceLogprobs to_host() const;
  // On the host: row r as a TokenLogprob of `token` with its first k alternatives.
  TokenLogprob row(int64_t r, int32_t token, int32_t k) const;
};

// Grammar-constrained decoding: the allowed-token bitmasks of some rows of a step, filled on the
// host by the rows' grammar matchers (grammar/grammar.h). Applied after the penalties and
// logit_bias, before sampling; logprobs stay those of the model's distribution.
struct TokenBitmask {
  std::vector<int32_t> rows;   // [m] the masked rows (indices into the step's sampled rows), distinct
  std::vector<int32_t> words;  // [m, words_per_row]: bit t % 32 of word t / 32 allows token t
  int64_t words_per_row = 0;   // grammar::bitmask_words(vocab)
  bool empty() const { return rows.empty(); }
  // Adds a row and returns its words to fill.
  int32_t* add_row(int32_t row);
};

// What a sampled step leaves on the model's device until it is read.
struct DeviceSamples {
  Tensor tokens;                     // i32 [num_rows]
  // tokens' copy to the host, queued right after sampling: read() waits for it alone, not for the
  // step launched after this one (overlap scheduling). Null on the CPU.
  std::shared_ptr<AsyncDownload> tokens_host;
  DeviceLogprobs logprobs;           // [num_logprob_rows] (k: the largest request); undefined when no row wants them
  std::vector<int32_t> logprob_row;  // [num_rows]: the row's index in logprobs, -1: none
  std::vector<int32_t> logprob_k;    // [num_rows]: top alternatives the row asked for
};

class Sampler {
 public:
  // future_tokens: i32 [max_requests] on the logits' device (ModelRunner::future_tokens()); read by
  // rows with a pending slot. May be undefined when no row has one.
  explicit Sampler(Tensor future_tokens) : future_tokens_(std::move(future_tokens)) {}

  // Queues logprobs (log-softmax of the raw logits, before penalties and temperature, like vLLM),
  // penalties and sampling for every row; nothing waits for the device.
  //   logits: f32 [rows.size(), vocab], contiguous, penalised and masked in place; masks: the
  //   grammar-constrained rows' bitmasks (null or empty: none).
  DeviceSamples launch(const Tensor& logits, const std::vector<SampleRow>& rows,
                       const TokenBitmask* masks = nullptr) const;
  // Copies a launched step's samples to the host (waits for the device): one result per row.
  static std::vector<SampleResult> read(const DeviceSamples& samples);
  // launch + read.
  std::vector<SampleResult> sample(const Tensor& logits, const std::vector<SampleRow>& rows) const {
    return read(launch(logits, rows));
  }

 private:
  Tensor future_tokens_;
};

// The sampled tokens of `results`, in order.
std::vector<int32_t> sampled_tokens(const std::vector<SampleResult>& results);

// dst[i] = src[rows[i]] for f32 [*, vocab] tensors on one device: one device-side copy per run of
// consecutive rows (queued on the stream; no host wait).
void copy_rows(const Tensor& src, const std::vector<int64_t>& rows, const Tensor& dst);

}  // namespace rlm
