#include "kernels/cpu/rms_norm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

// out = (x * inv_rms) * w for one row; `x` and `out` may alias.
void normalize_row(const float* x, float* out, const float* w, int64_t d, float eps) {
  double sum = 0.0;
  for (int64_t k = 0; k < d; ++k) sum += static_cast<double>(x[k]) * x[k];
  const float variance = static_cast<float>(sum / static_cast<double>(d));
  const float inv = 1.0f / std::sqrt(variance + eps);
  for (int64_t k = 0; k < d; ++k) out[k] = w[k] * (x[k] * inv);
}

std::vector<float> weight_to_f32(const void* weight, DType dtype, int64_t d) {
  std::vector<float> w(static_cast<size_t>(d));
  convert_to_f32(weight, dtype, w.data(), w.size());
  return w;
}

// Rows are cheap, so hand out reasonably large chunks.
int64_t grain_for(int64_t d) { return d >= 4096 ? 4 : (16384 / (d + 1)) + 1; }

}  // namespace

void rms_norm(const RowSet& x, const RowSet& out, int64_t d, const void* weight, DType weight_dtype, float eps) {
  const std::vector<float> w = weight_to_f32(weight, weight_dtype, d);
  const int64_t rows = x.n0 * x.n1;
  parallel_for(rows, grain_for(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / x.n1, j = r % x.n1;
      normalize_row(x.row(i, j), out.row(i, j), w.data(), d, eps);
    }
  });
}

void fused_add_rms_norm(const RowSet& x, const RowSet& residual, int64_t d, const void* weight,
                        DType weight_dtype, float eps) {
  const std::vector<float> w = weight_to_f32(weight, weight_dtype, d);
  const int64_t rows = x.n0 * x.n1;
  parallel_for(rows, grain_for(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / x.n1, j = r % x.n1;
      float* xr = x.row(i, j);
      float* rr = residual.row(i, j);
      for (int64_t k = 0; k < d; ++k) rr[k] += xr[k];
      normalize_row(rr, xr, w.data(), d, eps);
    }
  });
}

}  // namespace rlm::cpu
