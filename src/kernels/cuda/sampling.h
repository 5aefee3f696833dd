// CUDA token sampling (twin of kernels/cpu/sampling.h): same semantics and the same random draw,
// so for logits whose probabilities are not within rounding of a threshold, greedy and seeded
// rows give the same token ids as the CPU sampler.
#pragma once

#include <cstdint>

namespace rlm::cuda {

// One row's parameters (host side); `uniform` is the draw u in [0, 1) (the caller computes it with
// cpu::sampling_uniform(seed, step), so the RNG is the CPU's, bit for bit).
struct SampleRow {
  float temperature = 1.0f;
  int32_t top_k = -1;
  float top_p = 1.0f;
  float min_p = 0.0f;
  double uniform = 0.0;
};

// out[i] = token sampled from logits row i.   logits: f32 [n, v] (row stride ld) on `device`;
// rows: host array of n; out: i32 [n] on `device` (element stride out_stride).
// Greedy rows (temperature < 1e-5 or top_k == 1): first argmax. Rows without filters: the first
// id (in id order) whose cumulative probability exceeds u. Rows with top-k/top-p/min-p: the row's
// probabilities are sorted (descending, ties by lower id: a stable segmented radix sort) and the
// filters and the draw are applied to the sorted prefix, exactly as in the CPU sampler.
void sample(int device, const float* logits, int64_t n, int64_t v, int64_t ld, const SampleRow* rows, int32_t* out,
            int64_t out_stride);

}  // namespace rlm::cuda
