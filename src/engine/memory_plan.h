// Start-up memory planning on a GPU: the KV pool gets what is left of `--mem-fraction-static` of the
// device once the weights, the largest step the configuration allows and the CUDA graphs are
// accounted for — measured by a profile run (ModelRunner runs the steps below on a temporary KV pool,
// captures the graphs, and reads the caching allocator's peak), never guessed. Pure functions here
// (unit-tested on the CPU); the measuring is ModelRunner::plan_memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/forward_batch.h"
#include "core/status.h"

namespace rlm {

// One synthetic step of the profile run.
struct ProfileStep {
  const char* what = "";
  ForwardMode mode = ForwardMode::kExtend;
  std::vector<int32_t> extend_lens;  // [num_requests] new tokens per request
  int32_t cached_prefix = 0;         // tokens each request has cached before its new ones
  bool cascade = false;              // run with cascade attention forced on (its extra buffers)
  // Every request samples one token with logprobs (the sampler's largest buffers); else only the
  // last one samples, without logprobs.
  bool sample_all = false;
};

// The steps whose peak bounds every step the scheduler may run with at most `max_num_tokens` new
// tokens, `max_requests` requests and `max_context_len` tokens per request: a prefill filling the
// token budget (requests of at most the context length); a mixed step of max_requests requests
// (all but one a decode token, all sampling); a decode step of max_requests requests; with cascade
// attention, the prefill again over a cached prefix run as cascade attention.
std::vector<ProfileStep> profile_steps(int64_t max_num_tokens, int64_t max_requests, int64_t max_context_len,
                                       bool cascade);
// KV slots the profile needs (every request's cached prefix and new tokens, page-aligned).
int64_t profile_kv_pages(const std::vector<ProfileStep>& steps, int64_t page_size);

// What the profile run measured, in bytes.
struct MemoryProfile {
  size_t total_bytes = 0;       // device memory
  size_t used_bytes = 0;        // in use after the profile (weights, CUDA context, workspaces, pools
                                // that stay), its temporary KV pool and graphs freed
  size_t persistent_bytes = 0;  // caching-allocator bytes the profile left allocated (grown scratch
                                // buffers, graph metadata buffers): in used_bytes, and again in
                                // activation_bytes / graph_bytes
  size_t activation_bytes = 0;  // peak allocator bytes live at once during the profile's steps,
                                // beyond what was allocated before them
  size_t graph_bytes = 0;       // CUDA graphs: their private pool, their buffers in the general pool
                                // and the driver memory the graph objects took
};

struct MemoryPlan {
  double fraction = 0.0;
  MemoryProfile profile;
  size_t budget_bytes = 0;  // total * fraction
  size_t fixed_bytes = 0;   // used - persistent: weights and everything else that stays
  size_t reserve_bytes = 0; // allocator rounding of the KV tensors
  size_t kv_bytes = 0;      // num_pages * bytes_per_page
  int64_t num_pages = 0;
  std::string describe() const;  // one line for logs: each part in GiB
};

// num_pages = floor((total * fraction - fixed - activations - graphs - reserve) / bytes_per_page).
// kResourceExhausted naming the numbers when fewer than min_pages fit.
StatusOr<MemoryPlan> plan_kv_memory(const MemoryProfile& profile, double fraction, size_t bytes_per_page,
                                    size_t reserve_bytes, int64_t min_pages);

}  // namespace rlm
