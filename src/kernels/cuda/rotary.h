// CUDA rotary embedding, in place on q and k (twin of kernels/cpu/rotary.h; pointers on `device`).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cuda {

// Heads of one tensor: head h of token t starts at data + t*token_stride + h*head_stride.
struct Heads {
  float* data = nullptr;
  int64_t num_heads = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// Rotates the first rotary_dim dims of every head of q and k. neox: pairs (i, i + half); GPT-J:
// pairs (2i, 2i + 1); pair i uses cos/sin column i of row positions[t] of cos_sin
// (f32 [max_positions, rotary_dim], contiguous, on the device). positions: i32/i64 [num_tokens]
// (element stride positions_stride); validated on the device before anything is modified.
void rotary_embedding(int device, const Heads& q, const Heads& k, int64_t num_tokens, const void* positions,
                      DType positions_dtype, int64_t positions_stride, const float* cos_sin, int64_t max_positions,
                      int64_t rotary_dim, bool is_neox);

}  // namespace rlm::cuda
