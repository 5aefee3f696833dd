// Generation in the model tests goes through the serving path: a ServingEngine over the test's own
// ModelRunner (no tokenizer: token ids in, token ids out) driven by the OfflineEngine.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "server/offline_engine.h"

namespace rlm::testing {

inline std::unique_ptr<ServingEngine> engine_over(std::unique_ptr<ModelRunner> runner,
                                                  const SchedulerConfig& config = {}) {
  return std::make_unique<ServingEngine>("test", std::move(runner), nullptr, std::nullopt, config);
}

// Greedy decoding of `max_tokens` tokens, EOS ignored.
inline OfflineRequest greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  OfflineRequest r;
  r.prompt_ids = std::move(prompt);
  r.params.max_new_tokens = max_tokens;
  r.params.temperature = 0.0f;
  r.params.ignore_eos = true;
  return r;
}

// The output ids of every request (empty, and a test failure, when generation fails).
inline std::vector<std::vector<int32_t>> generate_ids(ServingEngine& engine, const std::vector<OfflineRequest>& reqs) {
  OfflineEngine offline(engine);
  auto out = offline.generate(reqs);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  std::vector<std::vector<int32_t>> ids;
  if (out.is_ok()) {
    for (const OfflineOutput& o : *out) ids.push_back(o.output_ids);
  }
  return ids;
}

// After flushing the prefix cache, every KV page and recurrent-state slot is free again.
inline void expect_all_free(ServingEngine& engine) {
  OfflineEngine offline(engine);
  offline.flush_cache();
  EXPECT_EQ(offline.num_free_pages(), engine.runner().kv_pool().config().num_pages);
  const MambaPool* pool = engine.runner().mamba_pool();
  EXPECT_EQ(offline.num_free_mamba_slots(), pool != nullptr ? pool->num_slots() : 0);
}

}  // namespace rlm::testing
