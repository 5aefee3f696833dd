// CUDA RMSNorm and fused add + RMSNorm (twins of kernels/cpu/rms_norm.h; pointers on `device`).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cuda {

// n0 * n1 rows of d contiguous floats: row (i, j) starts at data + i*stride0 + j*stride1
// (a 2-D [n, d] tensor is n1 = 1; a per-head view [n, heads, d] has n1 = heads).
struct Rows {
  float* data = nullptr;
  int64_t n0 = 0, n1 = 1;
  int64_t stride0 = 0, stride1 = 0;
};

// out_row = (x_row * (1 / sqrt(mean(x_row^2) + eps))) * w, the sum of squares in double like the
// CPU. out may alias x.   weight: [d] of weight_dtype (f32/bf16/f16).
void rms_norm(int device, const Rows& x, const Rows& out, int64_t d, const void* weight, DType weight_dtype,
              float eps);
// residual_row += x_row; x_row = rms_norm(residual_row) * w.  In place on both.
void fused_add_rms_norm(int device, const Rows& x, const Rows& residual, int64_t d, const void* weight,
                        DType weight_dtype, float eps);

}  // namespace rlm::cuda
