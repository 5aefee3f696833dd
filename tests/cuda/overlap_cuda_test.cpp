// Overlap scheduling on the GPU: the scheduler launches decode step N+1 (inputs read from step N's
// samples in device memory) before processing N. Greedy and seeded-sampled outputs must be the same
// with overlap on and off, and greedy ones equal the transformers goldens (f32-weight models).
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "scheduler/scheduler.h"

namespace rlm {
namespace {

std::string source_dir() {
  const char* env = std::getenv("RADIXLM_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : RADIXLM_SOURCE_DIR;
}

class NullDecoder : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return {}; }
  std::string flush() override { return {}; }
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  int64_t free_pages = 0, total_pages = 0;
};

Outcome run(const std::string& dir, const nlohmann::json& g, bool overlap) {
  auto loaded = load_model(dir);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.device = Device::cuda(0);
  rc.attention_backend = "native";
  rc.page_size = 16;
  rc.max_requests = 8;
  rc.max_context_len = 192;
  rc.num_pages = 8 * 12;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  ModelStepExecutor exec(**runner);
  SchedulerConfig sc;
  sc.overlap_schedule = overlap;
  sc.max_running_requests = 8;
  Scheduler sched(exec, sc, [](bool, const std::vector<int32_t>&) { return std::make_unique<NullDecoder>(); });
  std::vector<std::shared_ptr<Req>> reqs;
  int i = 0;
  for (const auto& c : g["cases"]) {
    for (int sampled = 0; sampled < 2; ++sampled) {
      auto r = std::make_shared<Req>();
      r->rid = "r" + std::to_string(i++);
      r->prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
      r->params.max_new_tokens = 32;
      r->params.ignore_eos = true;
      if (sampled) {
        r->params.temperature = 0.8f;
        r->params.top_p = 0.9f;
        r->params.seed = 1234 + i;
      } else {
        r->params.temperature = 0.0f;
      }
      r->stream = std::make_shared<RequestStream>();
      EXPECT_TRUE(sched.submit(r).is_ok());
      reqs.push_back(r);
    }
  }
  for (int s = 0; s < 100000 && sched.has_work(); ++s) sched.step();
  EXPECT_FALSE(sched.has_work());
  Outcome o;
  for (const auto& r : reqs) o.tokens.push_back(r->output_ids);
  sched.flush_cache();
  o.free_pages = sched.num_free_pages();
  o.total_pages = rc.num_pages;
  return o;
}

TEST(OverlapCuda, SameTokensOnAndOffAndGoldenGreedy) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"llama_gqa1_hd64", "qwen3_gqa2_hd128", "qwen2_gqa4_hd128"}) {
    SCOPED_TRACE(name);
    const std::string dir = source_dir() + "/tests/golden/" + name;
    std::ifstream gin(dir + "/golden.json");
    const nlohmann::json g = nlohmann::json::parse(gin);
    const Outcome on = run(dir, g, true);
    const Outcome off = run(dir, g, false);
    EXPECT_EQ(on.tokens, off.tokens);
    for (size_t c = 0; c < g["cases"].size(); ++c) {
      EXPECT_EQ(on.tokens[2 * c], g["cases"][c]["greedy_ids"].get<std::vector<int32_t>>()) << "case " << c;
      EXPECT_EQ(on.tokens[2 * c + 1].size(), 32u);
    }
    EXPECT_EQ(on.free_pages, on.total_pages);
    EXPECT_EQ(off.free_pages, off.total_pages);
  }
}

}  // namespace
}  // namespace rlm
