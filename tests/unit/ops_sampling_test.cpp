// ops::sample: greedy equivalences, reproducibility of the counter-based RNG, the kept sets of
// top-k / top-p / min-p, and empirical frequencies against the renormalised distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "kernels/cpu/sampling.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::TestRng;

int32_t sample_one(const Tensor& logits_row, const ops::SamplingRow& row) {
  Tensor out = Tensor::empty({1}, DType::kI32);
  out.fill_(-1);
  ops::sample(logits_row, {row}, out);
  return out.at<int32_t>({0});
}

// Double-precision reference of the kept set and its renormalised probabilities (ops.h order).
std::vector<double> kept_distribution(const std::vector<float>& logits, const ops::SamplingRow& r) {
  const size_t v = logits.size();
  std::vector<double> p(v);
  const double m = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (size_t j = 0; j < v; ++j) total += (p[j] = std::exp((logits[j] - m) / r.temperature));
  for (double& x : p) x /= total;
  std::vector<size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  size_t keep = r.top_k > 0 ? std::min<size_t>(r.top_k, v) : v;
  if (r.top_p < 1.0f) {
    double kept = 0, cum = 0;
    for (size_t i = 0; i < keep; ++i) kept += p[order[i]];
    size_t n = 0;
    while (n < keep && cum < r.top_p * kept) cum += p[order[n++]];
    keep = std::max<size_t>(n, 1);
  }
  std::vector<double> q(v, 0.0);
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) {
    if (i > 0 && p[order[i]] < r.min_p * p[order[0]]) continue;
    kept += (q[order[i]] = p[order[i]]);
  }
  for (double& x : q) x /= kept;
  return q;
}

TEST(OpsSample, GreedyEqualsArgmax) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t v : {1, 3, 17, 129, 50000}) {
    const int64_t n = 6;
    const Tensor logits = testing::random_normal(rng, {n, v}, 3.0f);
    Tensor am = Tensor::empty({n}, DType::kI32);
    ops::argmax(logits, am);
    std::vector<ops::SamplingRow> rows(n);
    for (int64_t i = 0; i < n; ++i) {
      rows[i].seed = rng.gen()();
      rows[i].step = static_cast<uint64_t>(i);
      if (i % 3 == 0) rows[i].temperature = 0.0f;
      if (i % 3 == 1) rows[i].top_k = 1;
      if (i % 3 == 2) rows[i].temperature = 1e-7f;
    }
    Tensor out = Tensor::empty({n}, DType::kI32);
    out.fill_(-1);
    ops::sample(logits, rows, out);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out.at<int32_t>({i}), am.at<int32_t>({i})) << "v " << v << " row " << i;
  }
}

TEST(OpsSample, SameSeedAndStepReproduceOnAnyBatchComposition) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t v = 1000, n = 8;
  const Tensor logits = testing::random_normal(rng, {n, v}, 2.0f);
  std::vector<ops::SamplingRow> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    rows[i].seed = rng.gen()();
    rows[i].step = rng.randint(0, 1000);
    rows[i].temperature = 0.8f;
    rows[i].top_k = i % 2 ? 50 : -1;
    rows[i].top_p = i % 4 == 3 ? 0.9f : 1.0f;
  }
  Tensor batched = Tensor::empty({n}, DType::kI32);
  ops::sample(logits, rows, batched);
  for (int64_t i = n - 1; i >= 0; --i) {  // one at a time, in another order
    EXPECT_EQ(sample_one(logits.slice(0, i, i + 1), rows[i]), batched.at<int32_t>({i})) << "row " << i;
  }
  // Different seeds (or steps) give different tokens from a flat distribution.
  const Tensor flat = Tensor::zeros({1, v}, DType::kF32);
  std::set<int32_t> seen_seeds, seen_steps;
  for (uint64_t s = 0; s < 20; ++s) {
    ops::SamplingRow r;
    r.seed = s;
    seen_seeds.insert(sample_one(flat, r));
    r.seed = 7;
    r.step = s;
    seen_steps.insert(sample_one(flat, r));
  }
  // 20 uniform draws from 1000 tokens collide with probability < 0.2; demand at least 15 distinct.
  EXPECT_GE(seen_seeds.size(), 15u);
  EXPECT_GE(seen_steps.size(), 15u);
}

TEST(OpsSample, NeverLeavesTheKeptSet) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 40; ++trial) {
    // Large flat vocabularies make top-p keep hundreds of tokens (the incremental partial sort).
    const int64_t v = trial % 2 ? 200 : 5000;
    const Tensor logits = testing::random_normal(rng, {1, v}, v > 1000 ? 0.5f : 3.0f);
    std::vector<float> lv(logits.data<float>(), logits.data<float>() + v);
    ops::SamplingRow r;
    r.temperature = static_cast<float>(rng.uniform(0.3, 1.5));
    r.top_k = trial % 3 == 0 ? -1 : static_cast<int32_t>(rng.randint(2, 20));
    r.top_p = trial % 3 == 1 ? 1.0f : static_cast<float>(rng.uniform(0.2, 0.95));
    r.min_p = trial % 4 == 1 ? static_cast<float>(rng.uniform(0.01, 0.3)) : 0.0f;
    if (v > 1000) {
      r.temperature = static_cast<float>(rng.uniform(1.0, 1.5));
      if (r.top_p < 1.0f) r.top_p = static_cast<float>(rng.uniform(0.5, 0.95));
    }
    r.seed = rng.gen()();
    const std::vector<double> q = kept_distribution(lv, r);
    size_t kept = 0;
    for (double x : q) kept += x > 0 ? 1 : 0;
    if (v > 1000 && r.top_k < 0 && r.min_p == 0.0f) {
      EXPECT_GT(kept, 256u) << "the flat case should keep more than the first sorted chunk";
    }
    for (uint64_t step = 0; step < (v > 1000 ? 100u : 300u); ++step) {
      r.step = step;
      const int32_t tok = sample_one(logits, r);
      ASSERT_TRUE(tok >= 0 && tok < v);
      ASSERT_GT(q[tok], 0.0) << "token " << tok << " is outside the kept set (trial " << trial << ", top_k " << r.top_k
                             << ", top_p " << r.top_p << ", min_p " << r.min_p << ")";
    }
  }
}

TEST(OpsSample, FrequenciesMatchTheRenormalisedDistribution) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t v = 6;
  const int draws = 40000;
  const std::vector<ops::SamplingRow> configs = [] {
    std::vector<ops::SamplingRow> c(4);
    c[1].temperature = 0.7f;
    c[1].top_k = 4;
    c[2].top_p = 0.8f;
    c[3].temperature = 1.3f;
    c[3].min_p = 0.2f;
    return c;
  }();
  for (ops::SamplingRow r : configs) {
    const Tensor logits = testing::random_normal(rng, {1, v}, 1.0f);
    const std::vector<float> lv(logits.data<float>(), logits.data<float>() + v);
    const std::vector<double> q = kept_distribution(lv, r);
    r.seed = rng.gen()();
    std::vector<int> count(v, 0);
    for (int s = 0; s < draws; ++s) {
      r.step = static_cast<uint64_t>(s);
      ++count[sample_one(logits, r)];
    }
    for (int64_t j = 0; j < v; ++j) {
      // Binomial: |freq - q| <= 5 standard deviations (+1/draws), false alarm rate ~1e-6 per token.
      const double freq = static_cast<double>(count[j]) / draws;
      const double bound = 5.0 * std::sqrt(q[j] * (1 - q[j]) / draws) + 1.0 / draws;
      EXPECT_NEAR(freq, q[j], bound) << "token " << j << " top_k " << r.top_k << " top_p " << r.top_p << " min_p "
                                     << r.min_p << " temperature " << r.temperature;
      if (q[j] == 0.0) {
        EXPECT_EQ(count[j], 0) << "token " << j << " is outside the kept set";
      }
    }
  }
}

TEST(OpsSample, UniformIsAFunctionOfSeedAndStep) {
  EXPECT_EQ(cpu::sampling_uniform(1, 2), cpu::sampling_uniform(1, 2));
  EXPECT_NE(cpu::sampling_uniform(1, 2), cpu::sampling_uniform(2, 1));
  double lo = 1, hi = 0;
  for (uint64_t s = 0; s < 10000; ++s) {
    const double u = cpu::sampling_uniform(42, s);
    ASSERT_TRUE(u >= 0.0 && u < 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.999);
}

TEST(OpsSample, BadParametersAreErrors) {
  const Tensor logits = Tensor::zeros({2, 5}, DType::kF32);
  Tensor out = Tensor::empty({2}, DType::kI32);
  std::string msg = testing::error_of([&] { ops::sample(logits, {ops::SamplingRow{}}, out); });
  EXPECT_NE(msg.find("1 sampling rows given for logits f32[2, 5] cpu"), std::string::npos) << msg;
  ops::SamplingRow bad;
  bad.top_p = 0.0f;
  msg = testing::error_of([&] { ops::sample(logits, {ops::SamplingRow{}, bad}, out); });
  EXPECT_NE(msg.find("row 1: top_p must be in (0, 1]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlm
