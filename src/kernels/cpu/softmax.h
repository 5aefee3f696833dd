// CPU row-wise softmax, log-softmax and argmax over f32 logits.
#pragma once

#include <cstdint>

namespace rlm::cpu {

// In place on rows of v floats (row stride ld): max-subtracted, exp in f32, sum in double.
void softmax(float* x, int64_t n, int64_t v, int64_t ld);
// (x - max) - log(sum(exp(x - max))).
void log_softmax(float* x, int64_t n, int64_t v, int64_t ld);
// out[i] = first index of the row maximum (NaNs are skipped; an all-NaN row gives 0).
void argmax(const float* x, int64_t n, int64_t v, int64_t ld, int32_t* out);

// Single-row helpers shared with the sampler.
int64_t argmax_row(const float* x, int64_t v);
float max_row(const float* x, int64_t v);

}  // namespace rlm::cpu
