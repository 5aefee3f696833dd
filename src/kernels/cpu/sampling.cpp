#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/random_fill.h"
#include "kernels/cpu/softmax.h"

namespace rlm::cpu {
namespace {

uint64_t splitmix64(uint64_t x) { return mix64(x + 0x9e3779b97f4a7c15ull); }

// Index of the first entry whose running sum exceeds `target` (the last positive entry when
// rounding leaves target at or past the total).
int64_t pick(const std::vector<double>& mass, double target) {
  double run = 0.0;
  int64_t last_positive = 0;
  for (size_t i = 0; i < mass.size(); ++i) {
    if (mass[i] <= 0.0) continue;
    run += mass[i];
    last_positive = static_cast<int64_t>(i);
    if (run > target) return last_positive;
  }
  return last_positive;
}

}  // namespace

double sampling_uniform(uint64_t seed, uint64_t step) {
  const uint64_t x = splitmix64(splitmix64(seed) ^ splitmix64(step ^ 0x5851f42d4c957f2dull));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

int32_t sample_row(const float* logits, int64_t v, const SamplingParams& params) {
  if (!(params.temperature >= kGreedyTemperature) || params.top_k == 1) {
    return static_cast<int32_t>(argmax_row(logits, v));
  }
  const float inv_t = 1.0f / params.temperature;
  const float m = max_row(logits, v) * inv_t;
  std::vector<double> prob(static_cast<size_t>(v));
  double total = 0.0;
  for (int64_t j = 0; j < v; ++j) {
    prob[j] = std::exp(logits[j] * inv_t - m);
    total += prob[j];
  }
  for (double& p : prob) p /= total;
  const double u = sampling_uniform(params.seed, params.step);

  const bool use_top_k = params.top_k > 0 && params.top_k < v;
  const bool use_top_p = params.top_p < 1.0f;
  const bool use_min_p = params.min_p > 0.0f;
  if (!use_top_k && !use_top_p && !use_min_p) return static_cast<int32_t>(pick(prob, u));

  // Rank tokens by probability (descending; ties by lower id). Only the prefix that the filters
  // keep is ever sorted: order[0, sorted) holds the top `sorted` tokens in rank order.
  std::vector<int32_t> order(static_cast<size_t>(v));
  std::iota(order.begin(), order.end(), 0);
  auto by_prob = [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); };
  int64_t sorted = 0;
  auto ensure_sorted = [&](int64_t n) {
    if (n <= sorted) return;
    std::partial_sort(order.begin() + sorted, order.begin() + n, order.end(), by_prob);
    sorted = n;
  };
  int64_t keep = use_top_k ? params.top_k : v;
  if (use_top_p) {
    double kept_total = 0.0;
    if (use_top_k) {
      ensure_sorted(keep);
      for (int64_t i = 0; i < keep; ++i) kept_total += prob[order[i]];
    } else {
      for (double p : prob) kept_total += p;
    }
    const double target = static_cast<double>(params.top_p) * kept_total;
    double cum = 0.0;
    int64_t n = 0;
    while (n < keep && cum < target) {
      if (n == sorted) ensure_sorted(std::min(keep, std::max<int64_t>(256, 2 * sorted)));
      cum += prob[order[n++]];
    }
    keep = std::max<int64_t>(n, 1);
  }
  if (use_min_p) {
    const double threshold = static_cast<double>(params.min_p) * *std::max_element(prob.begin(), prob.end());
    int64_t count = 0;
    for (double p : prob) count += p >= threshold ? 1 : 0;
    keep = std::min(keep, std::max<int64_t>(count, 1));
  }
  ensure_sorted(keep);
  std::vector<double> mass(static_cast<size_t>(keep));
  double kept_total = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept_total += (mass[i] = prob[order[i]]);
  return order[pick(mass, u * kept_total)];
}

}  // namespace rlm::cpu
