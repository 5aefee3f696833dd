// CUDA FP8 (E4M3) linear layer (twin of kernels/cpu/fp8_linear.h; pointers on `device`). Host-only
// header (no CUDA types).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/rms_norm.h"

namespace rlm::cuda {

// An e4m3 weight and its scales, as in cpu::Fp8WeightView (device pointers).
struct Fp8Weight {
  const void* data = nullptr;  // e4m3 [n, k], row stride ldw
  int64_t n = 0, k = 0, ldw = 0;
  const float* scale = nullptr;  // [n], or [ceil(n / block_n), ceil(k / block_k)]
  int64_t block_n = 0, block_k = 0;
  const float* input_scale = nullptr;  // f32 [1] static activation scale, or null (dynamic)
};

// out[m, n] = x[m, k] @ w^T (+ bias) with the arithmetic of cpu::fp8_linear(quantize_activations =
// true): x quantized to e4m3 (per token, per token and block_k group, or with the static scale) by
// one kernel into the context scratch, then
//  - m <= kFp8GemvMaxRows: a GEMV kernel — memory-bound decode. On sm_89+ with k % 64 == 0 (block
//    scales: block_k % 64 == 0) it runs on the tensor cores (m16n8k32 e4m3 MMAs of 32 products
//    each, added in f32 -- sm_90 executes them as f16 MMAs on operands widened in every
//    instruction; relative error against the CPU twin ~1e-4, as cuBLASLt's); otherwise one
//    warp per weight row with f32 products (CUDA cores). Scales in the epilogue;
//  - otherwise, per-channel weights on sm_89+ with k, n, ldw multiples of 16: cuBLASLt FP8 GEMM
//    (e4m3 x e4m3, f32 output) with the per-token x per-channel scales applied by cuBLASLt itself
//    (outer-vector scaling) from 128 rows when there is no bias and it offers an algorithm for
//    that (fewer rows: its 128 x 128-tile algorithms lose more than the epilogue costs), else the
//    unscaled product and an epilogue kernel applying the scales and the bias (the FMA kernel
//    below when cuBLASLt offers no algorithm at all); the heuristic's algorithm is kept per shape;
//  - else (block scales, sm_80, unaligned shapes) a tiled FMA kernel with the same arithmetic
//    (block scales applied per block_k column group).
// Launches on the device's stream only (no allocation beyond the scratch, no synchronization):
// capturable in a CUDA graph.
void fp8_linear(int device, const float* x, int64_t m, int64_t ldx, const Fp8Weight& w, const void* bias,
                DType bias_dtype, float* out, int64_t ldo);

inline constexpr int64_t kFp8GemvMaxRows = 8;

// fp8_linear of silu(gate) * up for gate_up = [gate | up] f32 [m, 2 * w.k] (row stride ldx), with
// SiLU-and-mul folded into the activation quantization (one kernel reads gate_up and writes the
// e4m3 codes; no f32 [m, w.k] intermediate): bit-identical to silu_and_mul followed by fp8_linear.
// Applies to per-channel weights (per-token activation scales, dynamic or static) for more than
// kFp8GemvMaxRows rows (prefill and mixed steps; decode keeps its GEMV path), w.k % 4 == 0 and
// w.k <= 16384, ldx % 4 == 0, gate_up 16-byte aligned, unless RADIXLM_FP8_FUSED_SILU=0; returns
// false, having done nothing, where it does not apply.
bool fp8_linear_silu_and_mul_applies(int64_t m, int64_t ldx, const Fp8Weight& w, const float* gate_up);
bool fp8_linear_silu_and_mul(int device, const float* gate_up, int64_t m, int64_t ldx, const Fp8Weight& w,
                             const void* bias, DType bias_dtype, float* out, int64_t ldo);

// fp8_linear of rms_norm's output rows, with the activation quantization folded into the norm
// (cuda::rms_norm_fp8: one kernel writes the norm's f32 rows, as rms_norm / fused_add_rms_norm
// do, and their e4m3 codes and per-token scales): bit-identical to the norm followed by
// fp8_linear. fused: x += residual first (`other` the residual rows, the output is x), else `other`
// the output rows (may alias x). Applies to per-channel weights (dynamic or static activation
// scales) with w.k == d where rms_norm_fp8_applies, unless RADIXLM_FP8_FUSED_NORM=0; returns
// false, having done nothing, where it does not apply.
bool fp8_linear_rms_norm(int device, bool fused, const Rows& x, const Rows& other, int64_t d,
                         const void* norm_weight, DType norm_dtype, float eps, const Fp8Weight& w,
                         const void* bias, DType bias_dtype, float* out, int64_t ldo);

// The activation quantization alone (twin of cpu::quantize_fp8_rows): x f32 [m, k] (ldx) -> q
// e4m3 [m, k] contiguous and scales f32 [m, ceil(k / group)]; static_scale a device pointer or null.
void quantize_fp8_rows(int device, const float* x, int64_t m, int64_t k, int64_t ldx, int64_t group,
                       const float* static_scale, uint8_t* q, float* scales);

// Which path fp8_linear takes for these sizes on `device` (and a bias or none): "gemv_mma", "gemv",
// "cublaslt_scaled" (scales in cuBLASLt), "cublaslt" (scales in our epilogue) or "fma".
const char* fp8_linear_path(int device, int64_t m, const Fp8Weight& w, bool bias = false);

}  // namespace rlm::cuda
