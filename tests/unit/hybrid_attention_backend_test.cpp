// The `hybrid` attention backend sends prefill/extend steps to one backend and decode steps to the
// other, and gives the same tokens as either backend alone. A counting wrapper around the CPU
// backend, registered under two names, records which backend saw which step.
#include <gtest/gtest.h>

#include <map>

#include "attention/cpu_backend.h"
#include "attention/hybrid_backend.h"
#include "engine/model_loader.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

const std::string kModel = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/qwen3_gqa2_hd128";

// (backend name, mode) -> init_forward_metadata calls; forward calls per backend name.
std::map<std::pair<std::string, ForwardMode>, int>& step_counts() {
  static std::map<std::pair<std::string, ForwardMode>, int> m;
  return m;
}
std::map<std::string, int>& forward_counts() {
  static std::map<std::string, int> m;
  return m;
}

class CountingBackend : public AttentionBackend {
 public:
  explicit CountingBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  void init_forward_metadata(const ForwardBatch& batch) override {
    ++step_counts()[{name_, batch.mode}];
    inner_.init_forward_metadata(batch);
  }
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override {
    ++forward_counts()[name_];
    return inner_.forward(q, k, v, layer, batch);
  }

 private:
  std::string name_;
  CpuAttentionBackend inner_;
};

const bool kRegistered = register_attention_backend("count_a", [] { return std::make_unique<CountingBackend>("count_a"); }) &&
                         register_attention_backend("count_b", [] { return std::make_unique<CountingBackend>("count_b"); });

std::vector<std::vector<int32_t>> run(const std::string& prefill, const std::string& decode) {
  auto loaded = load_model(kModel);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.attention_backend = "cpu";
  rc.prefill_attention_backend = prefill;
  rc.decode_attention_backend = decode;
  rc.page_size = 4;
  rc.max_requests = 4;
  rc.max_context_len = 96;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  auto engine = testing::engine_over(std::move(runner).value());
  std::vector<OfflineRequest> reqs;
  for (int32_t len : {3, 17, 40}) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < len; ++i) prompt.push_back((i * 37 + len) % 500);
    reqs.push_back(testing::greedy_request(prompt, 12));
  }
  return testing::generate_ids(*engine, reqs);
}

TEST(HybridAttentionBackend, RoutesStepsByModeAndKeepsTokens) {
  ASSERT_TRUE(kRegistered);
  const auto reference = run("", "");
  step_counts().clear();
  forward_counts().clear();
  const auto hybrid = run("count_a", "count_b");
  EXPECT_EQ(hybrid, reference);
  EXPECT_GT((step_counts()[{"count_a", ForwardMode::kExtend}]), 0);
  EXPECT_EQ((step_counts()[{"count_a", ForwardMode::kDecode}]), 0);
  EXPECT_GT((step_counts()[{"count_b", ForwardMode::kDecode}]), 0);
  EXPECT_EQ((step_counts()[{"count_b", ForwardMode::kExtend}]), 0);
  // Every layer of every step went to the backend planned for that step.
  const int layers = static_cast<int>(load_model(kModel)->config.num_hidden_layers);
  EXPECT_EQ(forward_counts()["count_a"], (layers * step_counts()[{"count_a", ForwardMode::kExtend}]));
  EXPECT_EQ(forward_counts()["count_b"], (layers * step_counts()[{"count_b", ForwardMode::kDecode}]));
  // The same name twice is not hybrid.
  auto same = make_attention_backend("cpu", "count_a", "count_a");
  ASSERT_TRUE(same.is_ok());
  EXPECT_EQ((*same)->name(), "count_a");
  auto both = make_attention_backend("cpu", "count_a", "");
  ASSERT_TRUE(both.is_ok());
  EXPECT_EQ((*both)->name(), "hybrid(prefill=count_a,decode=cpu)");
}

TEST(HybridAttentionBackend, UnknownNamesAreErrors) {
  auto bad = make_attention_backend("cpu", "", "no_such_backend");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no_such_backend"), std::string::npos);
  EXPECT_NE(bad.status().message().find("available"), std::string::npos);
}

}  // namespace
}  // namespace rlm
