#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {

void moe_topk_softmax(const float* logits, int64_t ld, int64_t n, int64_t num_experts, int64_t top_k,
                      bool renormalize, float* weights, int32_t* ids) {
  parallel_for(n, std::max<int64_t>(1, 4096 / (num_experts + 1)), [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(num_experts));
    std::vector<int32_t> order(static_cast<size_t>(num_experts));
    for (int64_t t = begin; t < end; ++t) {
      const float* row = logits + t * ld;
      float mx = row[0];
      for (int64_t e = 1; e < num_experts; ++e) mx = std::max(mx, row[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < num_experts; ++e) sum += p[e] = std::exp(row[e] - mx);
      for (int64_t e = 0; e < num_experts; ++e) p[e] /= sum;
      for (int64_t e = 0; e < num_experts; ++e) order[e] = static_cast<int32_t>(e);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
        return p[a] > p[b] || (p[a] == p[b] && a < b);
      });
      float* w = weights + t * top_k;
      int32_t* id = ids + t * top_k;
      float total = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) {
        id[j] = order[j];
        w[j] = p[order[j]];
        total += w[j];
      }
      if (renormalize) {
        for (int64_t j = 0; j < top_k; ++j) w[j] /= total;
      }
    }
  });
}

void moe_experts(const float* x, int64_t ldx, int64_t n, int64_t hidden, int64_t inter, int64_t num_experts,
                 const MoeExpertLinear& gate_up_fn, const MoeExpertLinear& down_fn, const float* weights,
                 const int32_t* ids, int64_t top_k, float* out, int64_t ldo) {
  for (int64_t t = 0; t < n; ++t) std::fill(out + t * ldo, out + t * ldo + hidden, 0.0f);
  // Tokens (and their routing weight) per expert, in token order.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < top_k; ++j) routed[ids[t * top_k + j]].emplace_back(t, weights[t * top_k + j]);
  }
  std::vector<float> xs, gate_up, act, y;
  // Experts in increasing id: each token's contributions are summed in that order (HF index_add_).
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto& tokens = routed[e];
    if (tokens.empty()) continue;
    const int64_t m = static_cast<int64_t>(tokens.size());
    xs.resize(m * hidden);
    for (int64_t i = 0; i < m; ++i) std::memcpy(&xs[i * hidden], x + tokens[i].first * ldx, hidden * sizeof(float));
    gate_up.resize(m * 2 * inter);
    act.resize(m * inter);
    y.resize(m * hidden);
    gate_up_fn(e, xs.data(), m, gate_up.data());
    silu_and_mul(gate_up.data(), m, inter, 2 * inter, act.data(), inter);
    down_fn(e, act.data(), m, y.data());
    for (int64_t i = 0; i < m; ++i) {
      float* o = out + tokens[i].first * ldo;
      const float w = tokens[i].second;
      const float* yi = &y[i * hidden];
      for (int64_t k = 0; k < hidden; ++k) o[k] += yi[k] * w;
    }
  }
}

}  // namespace rlm::cpu
