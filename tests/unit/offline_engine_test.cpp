// OfflineEngine on a tiny golden model (CPU): more requests than the scheduler's queue holds still
// all run (submitted as room frees up), each output equals that request run alone on a fresh
// engine, outputs come back in request order, and nothing is left held afterwards.
#include <gtest/gtest.h>

#include "engine/model_loader.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

const std::string kModel = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/llama_gqa1_hd64";

std::unique_ptr<ServingEngine> make_engine(const SchedulerConfig& config) {
  auto loaded = load_model(kModel);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.page_size = 4;
  rc.max_requests = 2;
  rc.max_context_len = 64;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  return testing::engine_over(std::move(runner).value(), config);
}

TEST(OfflineEngine, RunsMoreRequestsThanTheQueueHoldsInOrder) {
  std::vector<OfflineRequest> reqs;
  for (int i = 0; i < 7; ++i) {
    std::vector<int32_t> prompt;
    for (int k = 0; k < 3 + 2 * i; ++k) prompt.push_back((k * 13 + i * 7 + 1) % 200);
    OfflineRequest r = testing::greedy_request(prompt, 4 + i);
    if (i % 2 == 1) {  // seeded sampling on every other request
      r.params.temperature = 0.9f;
      r.params.seed = 100 + i;
    }
    reqs.push_back(r);
  }
  SchedulerConfig config;
  config.max_queued_requests = 2;
  auto engine = make_engine(config);
  OfflineEngine offline(*engine);
  auto out = offline.generate(reqs);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    auto alone = make_engine(SchedulerConfig{});
    const auto want = testing::generate_ids(*alone, {reqs[i]});
    ASSERT_EQ(want.size(), 1u);
    EXPECT_EQ((*out)[i].output_ids, want[0]);
    EXPECT_EQ(static_cast<int64_t>((*out)[i].output_ids.size()), reqs[i].params.max_new_tokens);
    EXPECT_EQ((*out)[i].finish.reason, "length");
    EXPECT_EQ((*out)[i].finish.completion_tokens, reqs[i].params.max_new_tokens);
    EXPECT_TRUE((*out)[i].text.empty()) << "no tokenizer, no text";
  }
  EXPECT_TRUE(engine->scheduler().check_integrity().is_ok());
  testing::expect_all_free(*engine);
}

}  // namespace
}  // namespace rlm
