// CPU linear layer through OpenBLAS sgemm; 16-bit weights are widened block by block.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// Weight rows per sgemm call. Every weight dtype goes through the same blocking, so an f32 weight
// holding exactly the values of a bf16/f16 weight gives bit-identical outputs.
inline constexpr int64_t kLinearBlockRows = 256;

// out[i, j] = sum_k x[i, k] * weight[j, k] (+ bias[j]).
//   x: f32 [m, k] (row stride ldx >= k); weight: [n, k] of weight_dtype (f32/bf16/f16, row stride
//   ldw >= k); bias: [n] of bias_dtype or nullptr; out: f32 [m, n] (row stride ldo >= n).
// out must not overlap x or weight.
void linear(const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight, DType weight_dtype,
            int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out, int64_t ldo);

}  // namespace rlm::cpu
