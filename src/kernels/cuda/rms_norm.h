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

// The normalised rows also as FP8 (e4m3) codes for an FP8 linear (fp8_linear_rms_norm): q [rows, d]
// contiguous and one scale per row, with quantize_fp8_rows's arithmetic at one group per row --
// s = *static_scale, or max |value| / 448 (1 for a row of zeros); code = e4m3(value / s) -- so the
// codes and scales are bit-identical to the norm's f32 output quantized afterwards.
struct Fp8RowCodes {
  uint8_t* q = nullptr;
  float* scales = nullptr;
  const float* static_scale = nullptr;  // device f32 [1], or null (dynamic)
};

// rms_norm (fused = false: `other` the output rows, may alias x) or fused_add_rms_norm (fused =
// true: `other` the residual rows; the output is x) writing the output rows as above too, in the
// same kernel. Takes the float4 kernel's rows only (rms_norm_fp8_applies: d % 4 == 0, d at most
// 32 * kBlock, 16-byte aligned rows and q); the output and residual rows are written exactly as
// rms_norm / fused_add_rms_norm write them.
bool rms_norm_fp8_applies(const Rows& x, const Rows& other, int64_t d, const void* q);
void rms_norm_fp8(int device, bool fused, const Rows& x, const Rows& other, int64_t d, const void* weight,
                  DType weight_dtype, float eps, const Fp8RowCodes& codes);

}  // namespace rlm::cuda
