// CPU RMSNorm (HF LlamaRMSNorm semantics in f32) over rows addressed by two strided indices, so
// that per-head views inside a fused QKV buffer ([n, heads, head_dim]) work without copies.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// A set of n0 * n1 rows of d contiguous floats: row (i, j) starts at data + i*stride0 + j*stride1.
// A 2-D [n, d] tensor is n1 = 1.
struct RowSet {
  float* data = nullptr;
  int64_t n0 = 0, n1 = 1;
  int64_t stride0 = 0, stride1 = 0;
  float* row(int64_t i, int64_t j) const { return data + i * stride0 + j * stride1; }
};

// out_row = (x_row * (1 / sqrt(mean(x_row^2) + eps))) * w, all in f32 (the sum of squares is
// accumulated in double). x and out have the same n0, n1 and d; out may alias x.
//   weight: [d] of weight_dtype (f32/bf16/f16).
void rms_norm(const RowSet& x, const RowSet& out, int64_t d, const void* weight, DType weight_dtype, float eps);

// residual_row += x_row; x_row = rms_norm(residual_row) * w.  In place on both.
void fused_add_rms_norm(const RowSet& x, const RowSet& residual, int64_t d, const void* weight,
                        DType weight_dtype, float eps);

}  // namespace rlm::cpu
