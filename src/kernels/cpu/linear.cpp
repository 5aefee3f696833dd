#include "kernels/cpu/linear.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace rlm::cpu {
namespace {

typedef uint16_t U16x8 __attribute__((vector_size(16)));
typedef uint32_t U32x8 __attribute__((vector_size(32)));

// Exact bf16 -> f32 widening (the bf16 bits are the high half of the f32), 8 at a time.
#pragma GCC diagnostic ignored "-Wpsabi"
void widen_bf16(const bf16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    U16x8 h;
    std::memcpy(&h, src + i, sizeof(h));
    const U32x8 w = __builtin_convertvector(h, U32x8) << 16;
    std::memcpy(dst + i, &w, sizeof(w));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void widen_row(const char* src, DType dtype, float* dst, int64_t n) {
  if (dtype == DType::kBF16) {
    widen_bf16(reinterpret_cast<const bf16*>(src), dst, n);
  } else {
    convert_to_f32(src, dtype, dst, static_cast<size_t>(n));
  }
}

}  // namespace

void linear(const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight, DType weight_dtype,
            int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out, int64_t ldo) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(out + i * ldo, out + i * ldo + n, 0.0f);
  } else {
    thread_local std::vector<float> scratch;
    const size_t w_es = dtype_size(weight_dtype);
    for (int64_t j0 = 0; j0 < n; j0 += kLinearBlockRows) {
      const int64_t nb = std::min(kLinearBlockRows, n - j0);
      const char* wblock = static_cast<const char*>(weight) + static_cast<size_t>(j0 * ldw) * w_es;
      const float* b = nullptr;
      int64_t ldb = ldw;
      if (weight_dtype == DType::kF32) {
        b = reinterpret_cast<const float*>(wblock);
      } else {
        scratch.resize(static_cast<size_t>(nb * k));
        for (int64_t j = 0; j < nb; ++j) {
          widen_row(wblock + static_cast<size_t>(j * ldw) * w_es, weight_dtype, scratch.data() + j * k, k);
        }
        b = scratch.data();
        ldb = k;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(nb),
                  static_cast<blasint>(k), 1.0f, x, static_cast<blasint>(ldx), b, static_cast<blasint>(ldb), 0.0f,
                  out + j0, static_cast<blasint>(ldo));
    }
  }
  if (bias != nullptr) {
    std::vector<float> bf(static_cast<size_t>(n));
    convert_to_f32(bias, bias_dtype, bf.data(), bf.size());
    for (int64_t i = 0; i < m; ++i) {
      float* row = out + i * ldo;
      for (int64_t j = 0; j < n; ++j) row[j] += bf[j];
    }
  }
}

}  // namespace rlm::cpu
