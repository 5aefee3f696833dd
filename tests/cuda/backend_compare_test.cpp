// On the GPU, attention backends `native`, `cpu` (K/V stored on the GPU, attention computed on the
// host) and `hybrid` in both directions give identical greedy tokens on the f32-weight golden
// models (fp32 everywhere, so only summation order differs, and the goldens keep a top-1/top-2 gap
// of at least 1e-3 at every greedy step). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

std::string source_dir() {
  const char* env = std::getenv("RADIXLM_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : RADIXLM_SOURCE_DIR;
}

std::vector<std::string> f32_golden_models() {
  const std::string root = source_dir() + "/tests/golden";
  std::ifstream in(root + "/index.json");
  if (!in) return {};
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<std::string> names;
  for (const auto& n : index["models"]) {
    std::ifstream g(root + "/" + n.get<std::string>() + "/golden.json");
    if (nlohmann::json::parse(g)["disk_dtype"] == "float32") names.push_back(n.get<std::string>());
  }
  return names;
}

class BackendCompare : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendCompare, SameGreedyTokens) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = source_dir() + "/tests/golden/" + GetParam();
  std::ifstream gin(dir + "/golden.json");
  const nlohmann::json g = nlohmann::json::parse(gin);
  std::vector<OfflineRequest> reqs;
  for (const auto& c : g["cases"]) reqs.push_back(testing::greedy_request(c["prompt_ids"].get<std::vector<int32_t>>(), 32));
  const std::vector<std::pair<std::string, std::string>> combos = {
      {"native", "native"}, {"cpu", "cpu"}, {"cpu", "native"}, {"native", "cpu"}};
  for (const auto& [prefill, decode] : combos) {
    auto loaded = load_model(dir);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    ModelRunnerConfig rc;
    rc.device = Device::cuda(0);
    rc.attention_backend = "native";
    rc.prefill_attention_backend = prefill;
    rc.decode_attention_backend = decode;
    rc.page_size = 16;
    rc.max_requests = 8;
    rc.max_context_len = 192;
    auto runner = ModelRunner::create(std::move(loaded->model), rc);
    ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
    auto engine = testing::engine_over(std::move(runner).value());
    const auto out = testing::generate_ids(*engine, reqs);
    ASSERT_EQ(out.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(out[i], g["cases"][i]["greedy_ids"].get<std::vector<int32_t>>())
          << GetParam() << " prefill=" << prefill << " decode=" << decode << " case " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, BackendCompare, ::testing::ValuesIn(f32_golden_models()));
TEST(BackendCompareIndex, HasF32Models) { EXPECT_GE(f32_golden_models().size(), 3u); }

}  // namespace
}  // namespace rlm
