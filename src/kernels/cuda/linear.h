// CUDA linear layer through cuBLAS (twin of kernels/cpu/linear.h; pointers on `device`).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemv_fusion.h"

namespace rlm::cuda {

// out[i, j] = sum_k x[i, k] * weight[j, k] (+ bias[j]).
//   x: f32 [m, k] (row stride ldx >= k); weight: [n, k] of weight_dtype (row stride ldw >= k);
//   bias: [n] of bias_dtype or nullptr; out: f32 [m, n] (row stride ldo >= n); out must not
//   overlap x or weight.
// f32 weights: cublasGemmEx in f32 with CUBLAS_COMPUTE_32F (no TF32): matches the CPU sgemm to
// ~1e-6 relative L2. bf16/f16 weights: x is rounded to the weight dtype (into the context scratch)
// and the GEMM runs on 16-bit inputs with f32 accumulation and f32 output, so the result differs
// from the CPU (which widens the weight and keeps x in f32) by the rounding of x: ~3e-3 relative
// L2 for bf16, ~4e-4 for f16 (tests allow 1e-2).
// Small m (decode): when linear_uses_gemv(...) holds, a memory-bound GEMV kernel (kernels/cuda/gemv.cu)
// replaces the conversion pass + cuBLAS: same rounding of x, f32 products and sums in another order.
void linear(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight, DType weight_dtype,
            int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out, int64_t ldo);

// linear(...)'s GEMV with the fusions of f (gemv_fusion.h), one launch: out [m, n] (or [m, n / 2]
// with f.silu_and_mul) written or, with f.accumulate, added to. Runs and returns true where the
// GEMV path applies (linear_uses_gemv) with 1-2 rows of x (and an even n for SiLU-and-mul); else
// returns false having launched nothing. out must not overlap x.
bool linear_fused(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                  DType weight_dtype, int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out,
                  int64_t ldo, const GemvFusion& f);

// Process-wide switch for the GEMV path (default on; RADIXLM_LINEAR_GEMV=0 in the environment
// starts it off). For benchmarks and tests; not synchronized with linear calls in flight.
void set_linear_gemv_enabled(bool enabled);
bool linear_gemv_enabled();
// Whether linear(...) with these arguments takes the GEMV path: enabled, 1 <= m <= 8, bf16/f16
// weight, k > 0, k % 8 == 0, ldw % 8 == 0, weight pointer 16-byte aligned, and x rounded to 16 bits
// (m * k * 2 bytes) fits in linear_gemv_max_x_bytes(device) (the block's opt-in shared memory:
// 227 KiB on an H100, enough for m = 8 at k = 14336).
bool linear_uses_gemv(int device, int64_t m, int64_t k, const void* weight, DType weight_dtype, int64_t ldw);
int64_t linear_gemv_max_x_bytes(int device);

}  // namespace rlm::cuda
