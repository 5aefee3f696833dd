// CPU depthwise causal conv1d (+ SiLU) with a rolling per-request state (ops::causal_conv1d).
#pragma once

#include <cstdint>

#include "kernels/cpu/state_segments.h"

namespace rlm::cpu {

// For each request r and channel c, with in[] = the state's kernel_size - 1 inputs (zeros when
// !has_initial_state[r]) followed by x's rows of the request:
//   out[t, c] = act(bias[c] + sum_j weight[c, j] * in[t + j, c])
// then the state (and the snapshot slot, at track_len) receives the last kernel_size - 1 inputs.
//   x: [num_tokens, conv_dim] row stride ldx; weight: f32 [conv_dim, kernel_size]; bias: f32
//   [conv_dim] or nullptr; conv_state: f32 [num_slots, conv_dim, kernel_size - 1];
//   out: [num_tokens, conv_dim] row stride ldo (out == x with ldo == ldx is allowed).
void causal_conv1d(const float* x, int64_t ldx, int64_t conv_dim, const float* weight, const float* bias,
                   int64_t kernel_size, float* conv_state, const SegmentIndex& seg, bool silu, float* out,
                   int64_t ldo);

}  // namespace rlm::cpu
