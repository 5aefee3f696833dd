// Req: one generation request as the scheduler tracks it, from arrival to finish.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "scheduler/output_processor.h"
#include "scheduler/request_stream.h"
#include "scheduler/sampling_params.h"

namespace rlm {

namespace grammar {
class GrammarMatcher;
}

enum class ReqState : uint8_t { kQueued, kPending, kRunning, kFinished };

struct Req {
  using Clock = std::chrono::steady_clock;

  // Set by the submitter.
  std::string rid;                   // unique id (client-visible)
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  std::shared_ptr<RequestStream> stream;  // events go here
  std::string group;                 // n > 1 siblings of one prompt share a group id (prefill once); "" otherwise
  std::string parent_rid;            // the API request this sequence belongs to (all its choices); "" if none
  Clock::time_point arrival = Clock::now();

  // Scheduler state (scheduler thread only).
  ReqState state = ReqState::kQueued;
  std::vector<int32_t> output_ids;
  uint64_t seed = 0;                 // params.seed or one drawn at admission
  int32_t req_slot = -1;             // row of req_to_token, -1 when none
  CacheHandle cache_handle;          // locked cached prefix: positions [0, cache_handle.length)
  std::vector<int32_t> own_pages;    // pages for positions [cache_handle.length, ...), request-owned
  int64_t kv_len = 0;                // positions whose K/V are computed (by processed steps)
  // Overlap scheduling: what launched steps whose results are not processed yet add. Their K/V
  // positions follow kv_len; a sampled token among them is still on the device (kFutureToken).
  int64_t inflight_tokens = 0;
  int32_t inflight_outputs = 0;
  // Hybrid models (MambaPool slots, -1 when none). mamba_slot: the working recurrent state, after
  // kv_len tokens between steps. mamba_track_slot: where the model snapshots the state at a
  // chunk-aligned position; it holds the state after mamba_track_len tokens when that is > 0 (a
  // snapshot not yet given to the prefix cache). mamba_branch_len: an aligned position past the
  // resume point up to which the cache holds KV but no state; snapshotting there repairs the path.
  int32_t mamba_slot = -1;
  int32_t mamba_track_slot = -1;
  int64_t mamba_track_len = 0;
  int64_t mamba_branch_len = 0;
  int64_t cached_tokens = 0;         // prompt tokens that came from the prefix cache (first admission)
  int64_t prompt_logprobs_next = 1;  // prompt_logprobs: the next prompt position whose logprob is due

  // prompt_logprobs asked for and not all delivered: the prefill computes every position's logits
  // and does not start from a cached prefix.
  bool needs_prompt_logprobs() const {
    return params.prompt_logprobs >= 0 && prompt_logprobs_next < static_cast<int64_t>(prompt_ids.size());
  }
  bool counted_cache_hit = false;
  int64_t retractions = 0;
  bool abort_requested = false;
  std::unique_ptr<OutputProcessor> output;
  // params.grammar's matcher, made at admission; it has accepted every token in output_ids.
  std::shared_ptr<grammar::GrammarMatcher> grammar;
  Clock::time_point first_token_time{};
  Clock::time_point last_token_time{};

  // Tokens whose K/V the request needs: prompt then outputs (after a retraction the outputs are
  // recomputed too). The last sampled token has no K/V yet while the request runs.
  std::vector<int32_t> fill_ids() const {
    std::vector<int32_t> ids = prompt_ids;
    ids.insert(ids.end(), output_ids.begin(), output_ids.end());
    return ids;
  }
  int64_t seq_len() const { return static_cast<int64_t>(prompt_ids.size() + output_ids.size()); }
  // The next position a step may compute: after the processed and the in-flight ones.
  int64_t scheduled_len() const { return kv_len + inflight_tokens; }
  // Outputs once the in-flight ones are read.
  int64_t outputs_after_inflight() const { return static_cast<int64_t>(output_ids.size()) + inflight_outputs; }
  int64_t remaining_tokens() const {
    return std::max<int64_t>(0, params.max_new_tokens - static_cast<int64_t>(output_ids.size()));
  }
};

}  // namespace rlm
