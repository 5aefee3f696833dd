// OfflineEngine: batch generation in-process, like vLLM's `LLM` class — hand it a list of requests,
// it runs the scheduler loop on the calling thread until every request has finished and returns the
// outputs in request order. The same path from prompt to token as `radixlm serve` (ServingEngine:
// scheduler, ModelStepExecutor, Sampler, detokenizer, stop rules); `radixlm generate`, bench offline
// and the model parity tests use it.
//
//   auto engine = build_engine(args, std::move(files));   // server/engine_builder.h
//   OfflineEngine offline(**engine);
//   RLM_ASSIGN_OR_RETURN(std::vector<OfflineOutput> outs, offline.generate(requests));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/request_stream.h"
#include "scheduler/sampling_params.h"
#include "server/serving_engine.h"

namespace rlm {

struct OfflineRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;  // params.seed unset: a random seed per request
};

struct OfflineOutput {
  std::vector<int32_t> output_ids;
  std::string text;                     // streamed text, stop strings removed; "" without a tokenizer
  std::vector<TokenLogprob> logprobs;   // one per output token when params.logprobs >= 0
  FinishInfo finish;                    // reason "stop" or "length", the matched stop, token counts
};

class OfflineEngine {
 public:
  // Drives `engine`'s scheduler, which must not have been started (ServingEngine::start()).
  explicit OfflineEngine(ServingEngine& engine);

  // Checks every request first: an invalid one is kInvalidArgument "request i: ..." and nothing
  // runs. Then runs them all (as many at once as the scheduler admits) until each has finished.
  // When the scheduler's idle self-check is on (SchedulerConfig::check_integrity_when_idle), the
  // page/slot accounting is checked once everything finished (kInternal when it does not add up).
  StatusOr<std::vector<OfflineOutput>> generate(const std::vector<OfflineRequest>& requests);

  // Evicts every unlocked prefix-cache entry (e.g. between a warm-up and a measured run); with no
  // request running, every KV page is free afterwards.
  void flush_cache() { engine_.scheduler().flush_cache(); }
  int64_t num_free_pages() const { return engine_.scheduler().num_free_pages(); }
  int64_t num_free_mamba_slots() const { return engine_.scheduler().num_free_mamba_slots(); }

 private:
  ServingEngine& engine_;
  uint64_t next_id_ = 0;  // request ids "offline-<n>"
};

}  // namespace rlm
