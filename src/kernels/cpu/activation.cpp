#include "kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {

void silu_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo) {
  parallel_for(n, std::max<int64_t>(1, 16384 / (inter + 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* gate = x + r * ldx;
      const float* up = gate + inter;
      float* o = out + r * ldo;
      for (int64_t j = 0; j < inter; ++j) {
        const float g = gate[j];
        o[j] = (g / (1.0f + std::exp(-g))) * up[j];
      }
    }
  });
}

}  // namespace rlm::cpu
