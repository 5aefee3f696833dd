// CPU token sampling: temperature, top-k, top-p, min-p and a counter-based RNG, one row at a time.
#pragma once

#include <cstdint>

namespace rlm::cpu {

struct SamplingParams {
  float temperature = 1.0f;  // < kGreedyTemperature: greedy
  int32_t top_k = -1;        // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  uint64_t seed = 0;
  uint64_t step = 0;
};

inline constexpr float kGreedyTemperature = 1e-5f;

// A uniform double in [0, 1) that depends only on (seed, step): splitmix64 finalisers over both.
double sampling_uniform(uint64_t seed, uint64_t step);

// Samples one token from a row of v logits (not modified).
//   p = softmax(logits / T) (max-subtracted, f32 exp, double sums). If any filter is on, tokens are
//   ranked by p (descending, ties by lower id); top-k keeps the first k; top-p keeps the shortest
//   prefix whose cumulative mass reaches top_p times the mass kept by top-k (all of it when top-k is
//   off); min-p keeps tokens with p >= min_p * p_max. Only the kept prefix is ever sorted. The draw u = sampling_uniform(seed, step) picks the first kept token (in rank
//   order, or in id order when no filter is on) whose cumulative mass exceeds u * total.
// Greedy (T < kGreedyTemperature or top_k == 1) returns the first index of the maximum.
int32_t sample_row(const float* logits, int64_t v, const SamplingParams& params);

}  // namespace rlm::cpu
