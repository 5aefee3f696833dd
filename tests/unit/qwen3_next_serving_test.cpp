// Qwen3-Next end to end through the serving scheduler: the real model (tests/golden/qwen3next_*)
// behind ModelStepExecutor, chunked prefill (the recurrent state carried across steps), the
// hybrid radix cache (snapshots taken by the model at chunk-aligned positions, resumed from on
// a second round of the same prompts), mixed steps (decode rows beside prompt chunks: the Gated
// DeltaNet layers run the recurrent rule on the former and the chunked rule on the latter). Every
// request must reproduce the golden greedy tokens that transformers produced.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "scheduler/metrics.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_executor.h"

namespace rlm {
namespace {

const std::string kGoldenDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden";

class SilentDecoder : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return ""; }
  std::string flush() override { return ""; }
};

struct Golden {
  std::vector<int32_t> prompt, greedy;
};

std::vector<Golden> read_goldens(const std::string& name) {
  std::ifstream in(kGoldenDir + "/" + name + "/golden.json");
  RLM_CHECK(static_cast<bool>(in)) << "cannot open the golden of " << name;
  const nlohmann::json g = nlohmann::json::parse(in);
  std::vector<Golden> out;
  for (const auto& c : g["cases"]) {
    out.push_back({c["prompt_ids"].get<std::vector<int32_t>>(), c["greedy_ids"].get<std::vector<int32_t>>()});
  }
  return out;
}

std::vector<int32_t> drain_tokens(RequestStream& stream, std::string* finish_reason) {
  std::vector<int32_t> tokens;
  while (auto e = stream.pop(std::chrono::milliseconds(0))) {
    tokens.insert(tokens.end(), e->token_ids.begin(), e->token_ids.end());
    if (e->finish) *finish_reason = e->finish->reason;
  }
  return tokens;
}

struct Params {
  std::string model;
  int64_t page_size;
  std::string cache;
  bool overlap;
  bool mixed = true;  // mixed steps: decode rows (recurrent rule) beside prompt chunks (chunked rule)
};

void PrintTo(const Params& p, std::ostream* os) {
  *os << p.model << " page " << p.page_size << " " << p.cache << (p.overlap ? " overlap" : "")
      << (p.mixed ? "" : " prefill-first");
}

class Qwen3NextServing : public ::testing::TestWithParam<Params> {};

TEST_P(Qwen3NextServing, GreedyMatchesGoldenAcrossChunksAndCacheHits) {
  const Params p = GetParam();
  const std::vector<Golden> goldens = read_goldens(p.model);
  auto loaded = load_model(kGoldenDir + "/" + p.model);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.page_size = p.page_size;
  rc.max_requests = 8;
  rc.max_context_len = 192;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  ModelStepExecutor exec(**runner);
  SchedulerConfig cfg;
  cfg.cache = parse_cache_kind(p.cache).value();
  cfg.overlap_schedule = p.overlap;
  cfg.enable_mixed_chunk = p.mixed;
  cfg.chunked_prefill_size = 48;  // the long prompts prefill over several steps
  cfg.max_prefill_tokens = 96;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, [](bool, const std::vector<int32_t>&) { return std::make_unique<SilentDecoder>(); },
              metrics);
  for (int round = 0; round < 2; ++round) {  // round 1 finds the prompts in the cache
    std::vector<std::shared_ptr<Req>> reqs;
    for (size_t i = 0; i < goldens.size(); ++i) {
      auto r = std::make_shared<Req>();
      r->rid = "r" + std::to_string(round) + "_" + std::to_string(i);
      r->prompt_ids = goldens[i].prompt;
      r->params.temperature = 0.0f;
      r->params.max_new_tokens = static_cast<int64_t>(goldens[i].greedy.size());
      r->params.ignore_eos = true;
      r->stream = std::make_shared<RequestStream>();
      ASSERT_TRUE(s.submit(r).is_ok());
      reqs.push_back(r);
    }
    for (int i = 0; i < 10000 && s.has_work(); ++i) {
      s.step();
      const Status st = s.check_integrity();
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    ASSERT_FALSE(s.has_work());
    for (size_t i = 0; i < goldens.size(); ++i) {
      std::string reason;
      EXPECT_EQ(drain_tokens(*reqs[i]->stream, &reason), goldens[i].greedy)
          << p.model << " round " << round << " prompt of " << goldens[i].prompt.size() << " tokens";
      EXPECT_EQ(reason, "length");
    }
  }
  if (p.cache == "radix") {
    EXPECT_GT(metrics->cached_tokens(), 0) << "the second round never hit the cache";
  }
  EXPECT_EQ(metrics->mixed_steps() > 0, p.mixed) << "mixed steps were meant to run (and only then)";
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), exec.num_pages());
  EXPECT_EQ(exec.req_to_token().num_free(), exec.req_to_token().max_requests());
  EXPECT_EQ((*runner)->mamba_pool()->num_free(), (*runner)->mamba_pool()->num_slots()) << "state slots leaked";
}

INSTANTIATE_TEST_SUITE_P(Goldens, Qwen3NextServing,
                         // overlap_schedule = true must be harmless: the scheduler runs hybrid
                         // models one step at a time (one snapshot slot per request).
                         ::testing::Values(Params{"qwen3next_gqa2_int2_moe4top2", 1, "radix", false},
                                           Params{"qwen3next_gqa2_int2_moe4top2", 16, "radix", true},
                                           Params{"qwen3next_vgroup2_int4_moe8top3", 16, "radix", false},
                                           Params{"qwen3next_vgroup2_int4_moe8top3", 4, "naive", true},
                                           Params{"qwen3next_layertypes_sparse2_tied", 1, "radix", false},
                                           Params{"qwen3next_gqa2_int2_moe4top2", 1, "radix", false, false}),
                         [](const auto& info) {
                           return info.param.model + "_page" + std::to_string(info.param.page_size) + "_" +
                                  info.param.cache + (info.param.overlap ? "_overlap" : "") +
                                  (info.param.mixed ? "" : "_prefill_first");
                         });

}  // namespace
}  // namespace rlm
