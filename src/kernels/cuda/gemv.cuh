// Memory-bound GEMV / skinny GEMM for 16-bit weights and 1 <= m <= 8 rows of x (used by
// cuda::linear; see docs/perf/gemv.md). Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemv_fusion.h"

namespace rlm::cuda {

inline constexpr int64_t kGemvMaxRows = 8;  // m <= this

// Bytes of shared memory a block may opt into on `device` (x is staged there as m * k 16-bit values).
int64_t gemv_max_smem_bytes(int device);

// Whether gemv_launch accepts these arguments: m in [1, kGemvMaxRows], weight bf16/f16, k > 0 with
// k % 8 == 0, ldw % 8 == 0, weight 16-byte aligned (16-byte row loads), and m * k * 2 bytes of x
// fit in gemv_max_smem_bytes(device). Ignores the runtime enable flag.
bool gemv_supported(int device, int64_t m, int64_t k, const void* weight, DType weight_dtype, int64_t ldw);

// out[i, j] = sum_c round(x[i, c]) * weight[j, c] (+ bias[j]), round = to the weight dtype
// (nearest-even), products and sums in f32 (for 3-8 rows on sm_80+ with k % 32 == 0 summed by the
// tensor cores, in another order). Requires gemv_supported(...) and n >= 1.
//   x: f32 [m, k] (row stride ldx); weight: [n, k] (row stride ldw); bias: [n] of bias_dtype or
//   nullptr; out: f32 [m, n] (row stride ldo). Launches one kernel on `stream` (no allocation, no
//   synchronization: CUDA-graph capturable).
void gemv_launch(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                 DType weight_dtype, int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out,
                 int64_t ldo, cudaStream_t stream);

// The fused kernels (gemv_fusion.h) take 1-2 rows of x.
inline constexpr int64_t kGemvFusedMaxRows = 2;

// Whether gemv_fused_launch accepts these arguments: gemv_supported, m <= kGemvFusedMaxRows, and
// an even n for the SiLU-and-mul epilogue.
bool gemv_fused_supported(int device, int64_t m, int64_t k, const void* weight, DType weight_dtype,
                          int64_t ldw, int64_t n, const GemvFusion& f);

// gemv_launch with the fusions of f: out [m, n] (or [m, n / 2] with f.silu_and_mul) written or,
// with f.accumulate, added to. The dot products are those of gemv_launch (the same order), so
// without f.norm_weight the result has the bits of the unfused ops in turn. Requires
// gemv_fused_supported(...); f.norm_weight f32/bf16/f16 [k].
void gemv_fused_launch(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                       DType weight_dtype, int64_t n, int64_t ldw, const void* bias, DType bias_dtype,
                       float* out, int64_t ldo, const GemvFusion& f, cudaStream_t stream);

}  // namespace rlm::cuda
