#include "kernels/cpu/top_logprobs.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace rlm::cpu {

void top_logprobs(const float* logprobs, int64_t n, int64_t vocab, int64_t ld, const int32_t* tokens, int64_t k,
                  float* chosen, int32_t* top_ids, float* top_values) {
  std::vector<int32_t> idx;
  for (int64_t r = 0; r < n; ++r) {
    const float* x = logprobs + r * ld;
    const int32_t t = tokens[r];
    chosen[r] = t >= 0 && t < vocab ? x[t] : std::numeric_limits<float>::quiet_NaN();
    if (k == 0) continue;
    idx.resize(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [x](int32_t a, int32_t b) { return logprob_before(x[a], a, x[b], b); });
    for (int64_t i = 0; i < k; ++i) {
      top_ids[r * k + i] = idx[i];
      top_values[r * k + i] = x[idx[i]];
    }
  }
}

}  // namespace rlm::cpu
