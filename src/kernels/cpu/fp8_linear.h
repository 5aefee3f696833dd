// CPU FP8 (E4M3) linear layer: the reference for the CUDA FP8 GEMM/GEMV (kernels/cuda/fp8_linear.h).
// FP8 arithmetic is emulated in f32: e4m3 values are exact in f32, so are products of two of them,
// and the sums are f32 (like the tensor cores' accumulators), so the CPU and the GPU differ only in
// summation order. See docs/design/fp8.md for the formats and what is exact.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// Activation quantization, one scale per `group` consecutive columns of a row (group == k: per
// token; 128: per token and 128-column group, for block-scaled weights):
//   s = *static_scale when given, else max|x| over the group / 448 (1 for an all-zero group);
//   q = f32_to_f8e4m3(x / s) (round to nearest even, saturating at +-448).
//   x: f32 [m, k] (row stride ldx); q: e4m3 codes [m, k] contiguous; scales: f32 [m, ceil(k / group)]
//   contiguous.
void quantize_fp8_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t group, const float* static_scale,
                       uint8_t* q, float* scales);

// Scale of an e4m3 weight: w[j, c] = weight[j, c] * scale(j, c).
struct Fp8WeightView {
  const uint8_t* data = nullptr;  // e4m3 [n, k], row stride ldw
  int64_t n = 0, k = 0, ldw = 0;
  // block_n == 0: per output channel, scale[j] ([n]); else 2-D blocks of block_n x block_k,
  // scale[(j / block_n) * ceil(k / block_k) + c / block_k].
  const float* scale = nullptr;
  int64_t block_n = 0, block_k = 0;
  // Per-channel weights only: a static activation scale (f32 [1]); null: dynamic per token.
  const float* input_scale = nullptr;
};

// out[i, j] = sum_c xq[i, c] * w[j, c] (+ bias[j]) with
//  - quantize_activations: x quantized by quantize_fp8_rows (group k for per-channel weights,
//    block_k for blocks) and out = (sum_c q[i, c] * weight[j, c]) * (sx[i] * sw[j]) per channel,
//    or the sum over column groups g of (sum_{c in g} q * weight) * (sx[i, g] * sw[block]) for blocks
//    (the CUDA kernels' arithmetic);
//  - otherwise x stays f32 and the weight is dequantized to f32 (weight * scale, rounded once):
//    the dequantized-weight reference that transformers computes on an upcast checkpoint.
//   x: f32 [m, k] (ldx); bias: [n] of bias_dtype or null; out: f32 [m, n] (ldo), not overlapping x.
void fp8_linear(const float* x, int64_t m, int64_t ldx, const Fp8WeightView& w, const void* bias, DType bias_dtype,
                float* out, int64_t ldo, bool quantize_activations);

// Per-output-channel quantization of a float weight (load-time `--quantization fp8`):
//   scale[j] = max|w[j, :]| / 448 (1 for an all-zero row); q[j, c] = f32_to_f8e4m3(w[j, c] / scale[j]).
//   w: [n, k] of w_dtype (f32/bf16/f16), row stride ldw; q: e4m3 [n, k] contiguous; scale: f32 [n].
void quantize_fp8_weight_per_channel(const void* w, DType w_dtype, int64_t n, int64_t k, int64_t ldw, uint8_t* q,
                                     float* scale);

// f32 value of every e4m3 code (a 256-entry table).
const float* f8e4m3_table();

}  // namespace rlm::cpu
