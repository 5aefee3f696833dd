// CPU embedding lookup: raw pointers and row strides (in elements).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// out[i, :] = weight[ids[i], :], converted from weight_dtype to out_dtype (f32/bf16/f16 each).
//   ids: [num_tokens]; weight: [vocab_size, hidden] (row stride weight_stride);
//   out: [num_tokens, hidden] (row stride out_stride).
// Throws rlm::Error naming the position and value of the first id outside [0, vocab_size),
// before anything is written.
void embedding(const int32_t* ids, int64_t num_tokens, const void* weight, DType weight_dtype,
               int64_t weight_stride, int64_t vocab_size, int64_t hidden, void* out, DType out_dtype,
               int64_t out_stride);

}  // namespace rlm::cpu
