// Offline generation over a static batch: prefill a group of prompts together, then decode them
// step by step until each stops. The serving scheduler (continuous batching) builds on the same
// ModelRunner; this path backs `radixlm generate` and the model parity tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/page_allocator.h"
#include "engine/model_runner.h"

namespace rlm {

struct GenerateRequest {
  std::vector<int32_t> prompt_ids;
  int64_t max_tokens = 16;
  ops::SamplingRow sampling;  // temperature 0 => greedy
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
};

struct GenerateOutput {
  std::vector<int32_t> output_ids;
  std::string finish_reason;  // "stop" (EOS / stop id) or "length"
};

class Generator {
 public:
  explicit Generator(ModelRunner& runner);

  // Runs the requests in groups of at most `max_batch_size`; outputs are in request order.
  StatusOr<std::vector<GenerateOutput>> generate(const std::vector<GenerateRequest>& requests,
                                                 int64_t max_batch_size = 0);
  // f32 logits [prompt_len, vocab] for every prompt position (one extend step).
  StatusOr<Tensor> prompt_logits(const std::vector<int32_t>& prompt_ids);

  int64_t free_pages() const { return pages_.num_free(); }
  // Hybrid models: free MambaPool slots (each running request holds one); 0 for other models.
  int64_t free_mamba_slots() const;

 private:
  struct Active;
  Status validate(const GenerateRequest& r) const;
  Status run_group(const std::vector<GenerateRequest>& requests, size_t begin, size_t end,
                   std::vector<GenerateOutput>& outputs);
  // A request slot (and, for hybrid models, a MambaPool slot for its recurrent state); false when
  // either pool is exhausted (nothing is held then).
  bool admit(Active& a);
  // Slots for positions [from, to) of `a`, allocating pages as needed; false when KV is exhausted.
  bool grow(Active& a, int64_t to, std::vector<int32_t>& slots);
  void release(Active& a);

  ModelRunner& runner_;
  PageAllocator pages_;
};

}  // namespace rlm
