// What a decode GEMV may do around its dot products in the same launch (cuda::linear_fused,
// cuda::quant_linear_fused; ops::fused_linear states the semantics and when it applies). Plain C++:
// the ops layer fills it in.
#pragma once

#include "core/dtype.h"

namespace rlm::cuda {

struct GemvFusion {
  // Prologue: each row of x is RMS-normalized first, x_i / sqrt(mean(x_i^2) + eps) * norm_weight,
  // with rms_norm's arithmetic (x itself is not written). norm_weight: [k] of norm_dtype
  // (f32/bf16/f16), or nullptr for none.
  const void* norm_weight = nullptr;
  DType norm_dtype = DType::kF32;
  float eps = 0.0f;
  // Epilogue: the weight's n rows are [gate (n / 2) | up (n / 2)] and out [m, n / 2] receives
  // silu(gate) * up, with silu_and_mul's arithmetic.
  bool silu_and_mul = false;
  // Epilogue: out += the result (a residual stream), instead of out = the result.
  bool accumulate = false;
};

}  // namespace rlm::cuda
