// CPU linear layer for GGUF block-quantized weights, kept in their blocks: the activations are
// quantized to 8 bits per block once per call and multiplied with integer dot products
// (quant_dot.h), split over the thread pool by output rows. Batched rows (prefill, batched decode)
// reuse each weight row across a register tile of activation rows, and the rows are walked in
// passes that keep both operands in cache; for the 32-element block types but Q8_0, each tile of
// weight rows is unpacked once per pass into a per-thread scratch tile (~16 KB) that every group
// of activation rows of the pass reads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/quant_dot.h"

namespace rlm::cpu {

// out[i, j] = sum_k x[i, k] * dequant(weight)[j, k] (+ bias[j]).
//   x: f32 [m, k] (row stride ldx >= k); weight: [n, k] of the block dtype weight_dtype, rows
//   w_row_bytes apart (k a whole number of blocks); bias: [n] of bias_dtype or nullptr; out: f32
//   [m, n] (row stride ldo >= n), not overlapping x.
// The result differs from the f32 product only by the activations' 8-bit rounding: per
// activation block the error of each q is at most d / 2 = max|x| / 254.
void quant_linear(const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight, DType weight_dtype,
                  int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype, float* out, int64_t ldo,
                  CpuIsa isa = best_cpu_isa());

// Adds bias (f32/bf16/f16 [n]) to every row of out (f32 [m, n], row stride ldo).
void add_bias_rows(const void* bias, DType bias_dtype, int64_t m, int64_t n, float* out, int64_t ldo);

}  // namespace rlm::cpu
