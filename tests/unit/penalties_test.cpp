// ops::apply_penalties (CPU) against tools/make_sampling_reference.py (transformers' repetition
// penalty, OpenAI's frequency/presence formula).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/sampling_ops.h"

namespace rlm {
namespace {

TEST(Penalties, MatchReference) {
  std::ifstream in(std::string(RADIXLM_SOURCE_DIR) + "/tests/data/sampling/penalties.json");
  ASSERT_TRUE(static_cast<bool>(in));
  const auto j = nlohmann::json::parse(in);
  ASSERT_GE(j["cases"].size(), 20u);
  for (const auto& c : j["cases"]) {
    std::vector<float> logits = c["logits"].get<std::vector<float>>();
    const std::vector<float> expected = c["expected"].get<std::vector<float>>();
    ops::PenaltyRow p;
    p.repetition = c["repetition_penalty"].get<float>();
    p.frequency = c["frequency_penalty"].get<float>();
    p.presence = c["presence_penalty"].get<float>();
    ops::PenaltyBatch batch;
    batch.add_row(p, c["prompt"].get<std::vector<int32_t>>(), c["output"].get<std::vector<int32_t>>());
    const Tensor t = Tensor::from_vector(logits, {1, static_cast<int64_t>(logits.size())});
    ops::apply_penalties(t, batch, Tensor());
    std::copy(t.data<float>(), t.data<float>() + logits.size(), logits.begin());
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(logits[i], expected[i], 1e-5f * std::max(1.0f, std::abs(expected[i]))) << "token " << i;
    }
  }
}

}  // namespace
}  // namespace rlm
