// CUDA embedding lookup (twin of kernels/cpu/embedding.h; all pointers on `device`).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cuda {

// out[i, :] = weight[ids[i], :], converted from weight_dtype to out_dtype (f32/bf16/f16 each).
//   ids: i32 [num_tokens] (element stride ids_stride); weight: [vocab_size, hidden] (row stride
//   weight_stride); out: [num_tokens, hidden] (row stride out_stride).
// The ids are validated on the device first (index_check.h); an id outside [0, vocab_size) throws
// rlm::Error naming the position and the id, and nothing is written.
void embedding(int device, const int32_t* ids, int64_t num_tokens, int64_t ids_stride, const void* weight,
               DType weight_dtype, int64_t weight_stride, int64_t vocab_size, int64_t hidden, void* out,
               DType out_dtype, int64_t out_stride);

}  // namespace rlm::cuda
