// CUDA gated activation (twin of kernels/cpu/activation.h; pointers on `device`).
#pragma once

#include <cstdint>

namespace rlm::cuda {

// out[r, j] = silu(x[r, j]) * x[r, inter + j] in f32.
//   x: [n, 2*inter] (row stride ldx); out: [n, inter] (row stride ldo); out may equal x (ldo == ldx).
void silu_and_mul(int device, const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo);

}  // namespace rlm::cuda
