// CPU gated activations and element-wise row maps.
#pragma once

#include <cstdint>

namespace rlm::cpu {

// out[r, j] = silu(x[r, j]) * x[r, inter + j], silu(v) = v / (1 + exp(-v)), in f32.
//   x: [n, 2*inter] (row stride ldx); out: [n, inter] (row stride ldo). out may not overlap x
//   except exactly in place on the gate half (out == x with ldo == ldx).
void silu_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo);
// The same with gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) (PyTorch's
// gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh) in place of silu.
void gelu_tanh_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo);

// x[r, j] *= s, in place.   x: [n, d] (row stride ld).
void scale_rows(float* x, int64_t n, int64_t d, int64_t ld, float s);
// x[r, j] = cap * tanh(x[r, j] / cap), in place (logit soft-capping; cap > 0).   x: [n, d] (row stride ld).
void soft_cap_rows(float* x, int64_t n, int64_t d, int64_t ld, float cap);

}  // namespace rlm::cpu
