#include "kernels/cpu/gdn_gates.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// torch.nn.functional.softplus with beta 1, threshold 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

int64_t grain_for(int64_t d) { return std::max<int64_t>(1, 16384 / (d + 1)); }

}  // namespace

void rms_norm_gated(const RowSet& x, const RowSet& z, const RowSet& out, int64_t d, const void* weight,
                    DType weight_dtype, float eps) {
  std::vector<float> w(static_cast<size_t>(d));
  convert_to_f32(weight, weight_dtype, w.data(), w.size());
  parallel_for(x.n0 * x.n1, grain_for(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / x.n1, j = r % x.n1;
      const float* xr = x.row(i, j);
      const float* zr = z.row(i, j);
      float* o = out.row(i, j);
      double sum = 0.0;
      for (int64_t k = 0; k < d; ++k) sum += static_cast<double>(xr[k]) * xr[k];
      const float inv = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(d)) + eps);
      for (int64_t k = 0; k < d; ++k) {
        const float gate = zr[k] * sigmoid(zr[k]);
        o[k] = (w[k] * (xr[k] * inv)) * gate;
      }
    }
  });
}

void gdn_gating(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n, int64_t heads,
                const float* A_log, const float* dt_bias, float* g, int64_t ldg, float* beta, int64_t ldbeta) {
  std::vector<float> neg_a(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) neg_a[h] = -std::exp(A_log[h]);
  parallel_for(n, grain_for(heads), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        g[t * ldg + h] = neg_a[h] * softplus(a[t * lda + h] + dt_bias[h]);
        beta[t * ldbeta + h] = sigmoid(b[t * ldb + h]);
      }
    }
  });
}

void sigmoid_mul(const RowSet& x, const RowSet& gate, const RowSet& out, int64_t d) {
  parallel_for(x.n0 * x.n1, grain_for(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / x.n1, j = r % x.n1;
      const float* xr = x.row(i, j);
      const float* gr = gate.row(i, j);
      float* o = out.row(i, j);
      for (int64_t k = 0; k < d; ++k) o[k] = xr[k] * sigmoid(gr[k]);
    }
  });
}

void sigmoid_gate_add(const float* x, int64_t ldx, const float* gate, int64_t ldgate, int64_t n, int64_t d,
                      float* out, int64_t ldo) {
  parallel_for(n, grain_for(d), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float s = sigmoid(gate[i * ldgate]);
      const float* xr = x + i * ldx;
      float* o = out + i * ldo;
      for (int64_t k = 0; k < d; ++k) o[k] += s * xr[k];
    }
  });
}

}  // namespace rlm::cpu
