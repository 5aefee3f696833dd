// The engine's Sampler on a mixed batch of random logits (CPU): greedy and seeded rows, a penalised
// row, rows with and without logprobs (so the logprob rows' tokens are gathered on the device).
// Each row's token is what ops::sample gives that row alone (the sampler keys its RNG by seed and
// step, never by the batch) after a reference penalty pass written here; logprobs are those of the
// raw row (a double-precision log-softmax, within 1e-5), the k best in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/sampler.h"

#include "unit/no_fp_contract.h"  // the references round like the kernels

namespace rlm {
namespace {

constexpr int64_t kVocab = 300;

std::vector<double> log_softmax_ref(const float* x) {
  const double m = *std::max_element(x, x + kVocab);
  double sum = 0.0;
  for (int64_t i = 0; i < kVocab; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  std::vector<double> out(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) out[i] = static_cast<double>(x[i]) - m - std::log(sum);
  return out;
}

// HF repetition penalty over prompt + output, then frequency * count + presence over the output.
void penalise_ref(float* x, const ops::PenaltyRow& p, const std::vector<int32_t>& prompt,
                  const std::vector<int32_t>& output) {
  std::vector<bool> seen(kVocab, false);
  std::vector<int32_t> count(kVocab, 0);
  for (int32_t t : prompt) seen[t] = true;
  for (int32_t t : output) {
    seen[t] = true;
    ++count[t];
  }
  for (int64_t t = 0; t < kVocab; ++t) {
    if (seen[t]) x[t] = x[t] > 0 ? x[t] / p.repetition : x[t] * p.repetition;
    if (count[t] > 0) x[t] -= p.frequency * static_cast<float>(count[t]) + p.presence;
  }
}

TEST(Sampler, MixedBatchMatchesPerRowReferences) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> raw(static_cast<size_t>(5 * kVocab));
  for (float& v : raw) v = normal(rng);
  // Row 2's history holds its raw favourite three times: the penalties must move its greedy token.
  const int32_t favourite =
      static_cast<int32_t>(std::max_element(raw.begin() + 2 * kVocab, raw.begin() + 3 * kVocab) - raw.begin() - 2 * kVocab);
  const std::vector<int32_t> prompt{3, 17, 17, 250}, output{favourite, 99, favourite, favourite};

  std::vector<SampleRow> rows(5);
  rows[0] = SampleRow::greedy();
  rows[0].logprobs = 3;
  rows[1].sampling.temperature = 0.8f;  // seeded top-k + top-p, no logprobs
  rows[1].sampling.top_k = 50;
  rows[1].sampling.top_p = 0.9f;
  rows[1].sampling.seed = 7;
  rows[1].sampling.step = 3;
  rows[2] = SampleRow::greedy();  // penalised; logprob of the chosen token only
  rows[2].penalty.repetition = 1.3f;
  rows[2].penalty.frequency = 2.0f;
  rows[2].penalty.presence = 0.2f;
  rows[2].prompt_ids = &prompt;
  rows[2].output_ids = &output;
  rows[2].logprobs = 0;
  rows[3].sampling.min_p = 0.05f;  // seeded min-p at temperature 1
  rows[3].sampling.seed = 11;
  rows[3].logprobs = 5;
  rows[4] = SampleRow::greedy();

  Tensor logits = Tensor::from_vector(raw, {5, kVocab});
  const std::vector<SampleResult> got = Sampler(Tensor()).sample(logits, rows);
  ASSERT_EQ(got.size(), 5u);

  for (int64_t r = 0; r < 5; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    std::vector<float> row(raw.begin() + r * kVocab, raw.begin() + (r + 1) * kVocab);
    if (rows[r].prompt_ids != nullptr) penalise_ref(row.data(), rows[r].penalty, prompt, output);
    for (int64_t v = 0; v < kVocab; ++v) {
      ASSERT_EQ(logits.at<float>({r, v}), row[v]) << "the logits are penalised in place, like the reference";
    }
    const Tensor alone = Tensor::from_vector(row, {1, kVocab});
    Tensor want = Tensor::empty({1}, DType::kI32);
    ops::sample(alone, {rows[r].sampling}, want);
    EXPECT_EQ(got[r].token, want.data<int32_t>()[0]);
    if (rows[r].sampling.temperature == 0.0f) {
      EXPECT_EQ(got[r].token, std::max_element(row.begin(), row.end()) - row.begin());
    }
    ASSERT_EQ(got[r].logprob.has_value(), rows[r].logprobs >= 0);
    if (!got[r].logprob) continue;
    const std::vector<double> lp = log_softmax_ref(raw.data() + r * kVocab);  // raw: before penalties
    const TokenLogprob& tl = *got[r].logprob;
    EXPECT_EQ(tl.token, got[r].token);
    EXPECT_NEAR(tl.logprob, lp[tl.token], 1e-5);
    std::vector<int32_t> order(kVocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
    ASSERT_EQ(static_cast<int32_t>(tl.top.size()), rows[r].logprobs);
    for (size_t k = 0; k < tl.top.size(); ++k) {
      EXPECT_EQ(tl.top[k].first, order[k]) << "rank " << k;
      EXPECT_NEAR(tl.top[k].second, lp[order[k]], 1e-5) << "rank " << k;
    }
  }
  EXPECT_NE(got[2].token, favourite) << "the penalties did not move row 2's greedy token";
}

}  // namespace
}  // namespace rlm
