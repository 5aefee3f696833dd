// CUDA gated activations and element-wise row maps (twins of kernels/cpu/activation.h; pointers on
// `device`).
#pragma once

#include <cstdint>

namespace rlm::cuda {

// out[r, j] = act(x[r, j]) * x[r, inter + j] in f32, act = silu or gelu_tanh (as the CPU twins).
//   x: [n, 2*inter] (row stride ldx); out: [n, inter] (row stride ldo); out may equal x (ldo == ldx).
void silu_and_mul(int device, const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo);
void gelu_tanh_and_mul(int device, const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo);

// In place on x [n, d] (row stride ld): x *= s; x = cap * tanh(x / cap).
void scale_rows(int device, float* x, int64_t n, int64_t d, int64_t ld, float s);
void soft_cap_rows(int device, float* x, int64_t n, int64_t d, int64_t ld, float cap);

}  // namespace rlm::cuda
