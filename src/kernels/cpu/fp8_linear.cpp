#include "kernels/cpu/fp8_linear.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

float group_scale(const float* x, int64_t n, const float* static_scale) {
  if (static_scale != nullptr) return *static_scale;
  float amax = 0.0f;
  for (int64_t c = 0; c < n; ++c) amax = std::max(amax, std::fabs(x[c]));
  return amax > 0.0f ? amax / kF8E4M3Max : 1.0f;
}

// Rows [j0, j0 + nb) of the weight as f32: the e4m3 values (scaled by their weight scales when
// `dequantize`) into dst [nb, k].
void widen_rows(const Fp8WeightView& w, int64_t j0, int64_t nb, bool dequantize, float* dst) {
  const float* lut = f8e4m3_table();
  const int64_t kb = w.block_k > 0 ? (w.k + w.block_k - 1) / w.block_k : 0;
  for (int64_t j = 0; j < nb; ++j) {
    const uint8_t* src = w.data + (j0 + j) * w.ldw;
    float* d = dst + j * w.k;
    if (!dequantize) {
      for (int64_t c = 0; c < w.k; ++c) d[c] = lut[src[c]];
    } else if (w.block_n == 0) {
      const float s = w.scale[j0 + j];
      for (int64_t c = 0; c < w.k; ++c) d[c] = lut[src[c]] * s;
    } else {
      const float* srow = w.scale + ((j0 + j) / w.block_n) * kb;
      for (int64_t c = 0; c < w.k; ++c) d[c] = lut[src[c]] * srow[c / w.block_k];
    }
  }
}

void add_bias(const void* bias, DType bias_dtype, int64_t m, int64_t n, float* out, int64_t ldo) {
  std::vector<float> b(static_cast<size_t>(n));
  convert_to_f32(bias, bias_dtype, b.data(), b.size());
  for (int64_t i = 0; i < m; ++i) std::transform(b.begin(), b.end(), out + i * ldo, out + i * ldo, std::plus<float>());
}

void sgemm_nt(const float* a, int64_t m, int64_t k, int64_t lda, const float* b, int64_t n, int64_t ldb, float* c,
              int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), 1.0f, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c,
              static_cast<blasint>(ldc));
}

}  // namespace

const float* f8e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[i] = f8e4m3_to_f32(f8e4m3{static_cast<uint8_t>(i)});
    return t;
  }();
  return table.data();
}

void quantize_fp8_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t group, const float* static_scale,
                       uint8_t* q, float* scales) {
  RLM_CHECK(group > 0) << "quantize_fp8_rows: group " << group;
  const int64_t groups = (k + group - 1) / group;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * group, c1 = std::min(k, c0 + group);
      const float* xr = x + i * ldx;
      const float s = group_scale(xr + c0, c1 - c0, static_scale);
      scales[i * groups + g] = s;
      for (int64_t c = c0; c < c1; ++c) q[i * k + c] = f32_to_f8e4m3(xr[c] / s).bits;
    }
  }
}

void fp8_linear(const float* x, int64_t m, int64_t ldx, const Fp8WeightView& w, const void* bias, DType bias_dtype,
                float* out, int64_t ldo, bool quantize_activations) {
  RLM_CHECK(w.block_n >= 0 && w.block_k >= 0 && (w.block_n == 0) == (w.block_k == 0))
      << "fp8_linear: block " << w.block_n << " x " << w.block_k;
  RLM_CHECK(w.block_n == 0 || w.input_scale == nullptr) << "fp8_linear: block scales take dynamic activations only";
  const int64_t n = w.n, k = w.k;
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(out + i * ldo, out + i * ldo + n, 0.0f);
  } else if (!quantize_activations) {
    thread_local std::vector<float> wf;
    for (int64_t j0 = 0; j0 < n; j0 += kLinearBlockRows) {
      const int64_t nb = std::min(kLinearBlockRows, n - j0);
      wf.resize(static_cast<size_t>(nb * k));
      widen_rows(w, j0, nb, /*dequantize=*/true, wf.data());
      sgemm_nt(x, m, k, ldx, wf.data(), nb, k, out + j0, ldo);
    }
  } else {
    const int64_t group = w.block_n == 0 ? k : w.block_k;
    const int64_t groups = (k + group - 1) / group;
    std::vector<uint8_t> q(static_cast<size_t>(m * k));
    std::vector<float> sx(static_cast<size_t>(m * groups)), xq(static_cast<size_t>(m * k));
    quantize_fp8_rows(x, m, k, ldx, group, w.input_scale, q.data(), sx.data());
    const float* lut = f8e4m3_table();
    for (size_t i = 0; i < q.size(); ++i) xq[i] = lut[q[i]];
    thread_local std::vector<float> wf, part;
    if (w.block_n == 0) {
      for (int64_t j0 = 0; j0 < n; j0 += kLinearBlockRows) {
        const int64_t nb = std::min(kLinearBlockRows, n - j0);
        wf.resize(static_cast<size_t>(nb * k));
        widen_rows(w, j0, nb, /*dequantize=*/false, wf.data());
        sgemm_nt(xq.data(), m, k, k, wf.data(), nb, k, out + j0, ldo);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < nb; ++j) out[i * ldo + j0 + j] *= sx[i] * w.scale[j0 + j];
        }
      }
    } else {
      // One block row of weights at a time; each column group's partial sums get their own scales.
      for (int64_t j0 = 0; j0 < n; j0 += w.block_n) {
        const int64_t nb = std::min(w.block_n, n - j0);
        const float* sw = w.scale + (j0 / w.block_n) * groups;
        wf.resize(static_cast<size_t>(nb * k));
        part.resize(static_cast<size_t>(m * nb));
        widen_rows(w, j0, nb, /*dequantize=*/false, wf.data());
        for (int64_t i = 0; i < m; ++i) std::fill(out + i * ldo + j0, out + i * ldo + j0 + nb, 0.0f);
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t c0 = g * group, kg = std::min(k, c0 + group) - c0;
          sgemm_nt(xq.data() + c0, m, kg, k, wf.data() + c0, nb, k, part.data(), nb);
          for (int64_t i = 0; i < m; ++i) {
            const float s = sx[i * groups + g] * sw[g];
            for (int64_t j = 0; j < nb; ++j) out[i * ldo + j0 + j] += part[i * nb + j] * s;
          }
        }
      }
    }
  }
  if (bias != nullptr) add_bias(bias, bias_dtype, m, n, out, ldo);
}

void quantize_fp8_weight_per_channel(const void* w, DType w_dtype, int64_t n, int64_t k, int64_t ldw, uint8_t* q,
                                     float* scale) {
  const size_t es = dtype_size(w_dtype);
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = begin; j < end; ++j) {
      convert_to_f32(static_cast<const char*>(w) + static_cast<size_t>(j * ldw) * es, w_dtype, row.data(),
                     static_cast<size_t>(k));
      const float s = group_scale(row.data(), k, nullptr);
      scale[j] = s;
      for (int64_t c = 0; c < k; ++c) q[j * k + c] = f32_to_f8e4m3(row[c] / s).bits;
    }
  });
}

}  // namespace rlm::cpu
