// Shared by the CPU and CUDA cascade serving tests: golden models behind the serving scheduler
// with the radix cache, every prompt submitted twice per round so that the second round's extend
// steps hold adjacent requests over the same cached pages (a level-1 group) and chunked prefill
// gives requests their own cached prefixes. Whatever the cascade mode, every request must
// reproduce the greedy tokens transformers produced (tests/golden), and the backend must report
// that cascade steps (grouped ones where expected) actually ran.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "scheduler/metrics.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_executor.h"

namespace rlm::testing {

struct CascadeServingParams {
  std::string model;
  int64_t page_size;
  CascadeMode mode;
  bool expect_groups;
};

inline void PrintTo(const CascadeServingParams& p, std::ostream* os) {
  *os << p.model << " page " << p.page_size << " cascade " << cascade_mode_name(p.mode);
}

inline std::string cascade_serving_name(const CascadeServingParams& p) {
  return p.model + "_page" + std::to_string(p.page_size) + "_" + cascade_mode_name(p.mode);
}

// Runs the two rounds on `device` with attention backend `backend`.
inline void run_cascade_serving(const CascadeServingParams& p, Device device, const std::string& backend) {
  const std::string golden_dir = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden";
  struct Golden {
    std::vector<int32_t> prompt, greedy;
  };
  std::vector<Golden> goldens;
  {
    std::ifstream in(golden_dir + "/" + p.model + "/golden.json");
    ASSERT_TRUE(static_cast<bool>(in)) << "cannot open the golden of " << p.model;
    const nlohmann::json g = nlohmann::json::parse(in);
    for (const auto& c : g["cases"]) {
      goldens.push_back({c["prompt_ids"].get<std::vector<int32_t>>(), c["greedy_ids"].get<std::vector<int32_t>>()});
    }
  }
  class SilentDecoder : public TokenTextDecoder {
   public:
    std::string push(int32_t) override { return ""; }
    std::string flush() override { return ""; }
  };
  auto loaded = load_model(golden_dir + "/" + p.model);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.device = device;
  rc.attention_backend = backend;
  rc.page_size = p.page_size;
  rc.max_requests = 16;
  rc.max_context_len = 192;
  rc.cascade_attention = p.mode;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  ModelStepExecutor exec(**runner);
  SchedulerConfig cfg;
  cfg.cache = CacheKind::kRadix;
  cfg.chunked_prefill_size = 48;  // long prompts prefill over several steps (own cached prefixes)
  cfg.max_prefill_tokens = 512;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, [](bool, const std::vector<int32_t>&) { return std::make_unique<SilentDecoder>(); },
              metrics);
  for (int round = 0; round < 2; ++round) {  // round 1 finds the prompts in the cache
    std::vector<std::shared_ptr<Req>> reqs;
    std::vector<size_t> golden_of;
    for (size_t i = 0; i < goldens.size(); ++i) {
      for (int copy = 0; copy < 2; ++copy) {  // adjacent twins: same prefix pages in round 2
        auto r = std::make_shared<Req>();
        r->rid = "r" + std::to_string(round) + "_" + std::to_string(i) + "_" + std::to_string(copy);
        r->prompt_ids = goldens[i].prompt;
        r->params.temperature = 0.0f;
        r->params.max_new_tokens = static_cast<int64_t>(goldens[i].greedy.size());
        r->params.ignore_eos = true;
        r->stream = std::make_shared<RequestStream>();
        ASSERT_TRUE(s.submit(r).is_ok());
        reqs.push_back(r);
        golden_of.push_back(i);
      }
    }
    for (int i = 0; i < 10000 && s.has_work(); ++i) {
      s.step();
      const Status st = s.check_integrity();
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    ASSERT_FALSE(s.has_work());
    for (size_t k = 0; k < reqs.size(); ++k) {
      std::vector<int32_t> tokens;
      while (auto e = reqs[k]->stream->pop(std::chrono::milliseconds(0))) {
        tokens.insert(tokens.end(), e->token_ids.begin(), e->token_ids.end());
      }
      EXPECT_EQ(tokens, goldens[golden_of[k]].greedy) << p.model << " round " << round << " request " << reqs[k]->rid;
    }
  }
  const AttentionBackend::CascadeStats stats = (*runner)->attention_backend().cascade_stats();
  if (p.mode == CascadeMode::kOff) {
    EXPECT_EQ(stats.cascade_steps, 0);
  } else {
    EXPECT_GT(stats.cascade_steps, 0) << "no extend step ran as cascade attention";
  }
  if (p.expect_groups) {
    EXPECT_GT(stats.grouped_steps, 0) << "no step grouped the twins' shared prefix";
    EXPECT_GT(stats.saved_prefix_reads, 0);
  }
  EXPECT_GT(metrics->cached_tokens(), 0);
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), exec.num_pages());
}

// llama_gqa4_hd128_llama3rope has a 100-token prompt: its round-2 twins share >= 64 cached tokens.
inline std::vector<CascadeServingParams> cascade_serving_cases() {
  return {{"llama_gqa4_hd128_llama3rope", 1, CascadeMode::kAuto, true},
          {"llama_gqa4_hd128_llama3rope", 16, CascadeMode::kAuto, true},
          {"llama_gqa4_hd128_llama3rope", 4, CascadeMode::kOn, true},
          {"llama_gqa4_hd128_llama3rope", 1, CascadeMode::kOff, false},
          {"qwen3_gqa2_hd128", 1, CascadeMode::kOn, false},
          {"qwen2_gqa2_hd64_tied", 16, CascadeMode::kOn, false}};
}

}  // namespace rlm::testing
