// SchedulerConfig: the limits and policies of continuous batching (docs/design/scheduler.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace rlm {

// Order of admission among pending requests.
enum class SchedulePolicy : uint8_t {
  kFcfs,  // arrival order
  kLpm,   // longest cached prefix first
};
// Prefix cache kind.
enum class CacheKind : uint8_t {
  kRadix,  // shared prefixes (RadixCache, or HybridRadixCache for linear-attention models)
  kNaive,  // no sharing
};

StatusOr<SchedulePolicy> parse_schedule_policy(std::string_view name);  // "fcfs" | "lpm"
const char* schedule_policy_name(SchedulePolicy policy);
StatusOr<CacheKind> parse_cache_kind(std::string_view name);  // "radix" | "naive"
const char* cache_kind_name(CacheKind kind);

struct SchedulerConfig {
  int64_t max_running_requests = 64;
  int64_t chunked_prefill_size = 2048;  // most prompt tokens of one request per step
  // Most new tokens in one step with prompt tokens in it: prompt chunks plus, in a mixed step,
  // the running requests' decode tokens.
  int64_t max_prefill_tokens = 8192;
  SchedulePolicy policy = SchedulePolicy::kFcfs;
  CacheKind cache = CacheKind::kRadix;
  // Mixed steps: a step carries the decode token of every running request plus prompt chunks
  // within max_prefill_tokens, so arriving prompts never stall running streams for a whole step.
  // Off: prefill-first (a step with prompt chunks carries no decode tokens).
  bool enable_mixed_chunk = true;
  // Most prompt tokens of a mixed step (one that carries decode tokens); 0: no limit of its own
  // (max_prefill_tokens less the decode tokens). A smaller value shortens the steps running streams
  // wait through while prompts arrive; steps without decode tokens still take max_prefill_tokens.
  int64_t mixed_prefill_tokens = 0;
  int64_t mamba_chunk_size = 64;        // hybrid models: recurrent-state snapshot granularity
  int64_t max_context_len = 0;          // prompt + max_tokens limit; 0: the req_to_token width
  int64_t max_queued_requests = 4096;   // submit() answers kUnavailable beyond this
  double init_new_token_ratio = 0.7;    // share of running requests' remaining tokens reserved
  double min_new_token_ratio = 0.1;
  double new_token_ratio_decay = 0.002; // per step with decode tokens
  bool check_integrity_when_idle = true;
  // Overlap scheduling: while the device runs step N, the scheduler builds and launches step N+1
  // (whose decode inputs are N's samples, read in device memory) and only then processes N's
  // results. Covers decode, prefill and mixed steps; pauses (one step at a time) when a step
  // cannot be planned ahead without retracting, and for hybrid linear-attention models.
  bool overlap_schedule = true;
};

}  // namespace rlm
