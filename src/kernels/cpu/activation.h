// CPU gated activations.
#pragma once

#include <cstdint>

namespace rlm::cpu {

// out[r, j] = silu(x[r, j]) * x[r, inter + j], silu(v) = v / (1 + exp(-v)), in f32.
//   x: [n, 2*inter] (row stride ldx); out: [n, inter] (row stride ldo). out may not overlap x
//   except exactly in place on the gate half (out == x with ldo == ldx).
void silu_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo);

}  // namespace rlm::cpu
