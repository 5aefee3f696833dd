// CUDA row-wise softmax, log-softmax and argmax over f32 logits (twins of kernels/cpu/softmax.h).
#pragma once

#include <cstdint>

namespace rlm::cuda {

// In place on n rows of v floats (row stride ld): max-subtracted, exp in f32, sum in double.
void softmax(int device, float* x, int64_t n, int64_t v, int64_t ld);
// (x - max) - log(sum(exp(x - max))).
void log_softmax(int device, float* x, int64_t n, int64_t v, int64_t ld);
// out[i] = first index of the row maximum (NaNs skipped; an all-NaN row gives 0). out: i32 [n]
// with element stride out_stride.
void argmax(int device, const float* x, int64_t n, int64_t v, int64_t ld, int32_t* out, int64_t out_stride);

}  // namespace rlm::cuda
