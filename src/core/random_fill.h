// Counter-based random fills: element i is a function of (key, i) only, so a fill is split across
// threads with the same result for any thread count. Used by the dummy weights (model/
// weight_source.cpp) and the kernel benchmarks' random tensors (bench/cuda_timing.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm {

// splitmix64's finaliser: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Writes n elements of `dtype` (f32, bf16, f16 or f8e4m3) at dst: element i is (2 u_i - 1) * scale
// rounded to dtype, u_i the top 24 bits of mix64(key + (i + 1) * 0x9E3779B97F4A7C15) over 2^24 (so
// uniform on [-scale, scale) before rounding). num_threads threads (0: the machine's cores, at most
// 32, and at most one per 16 chunks of 65,536 elements, so small tensors are filled in the caller).
void fill_uniform_counter(uint64_t key, float scale, DType dtype, void* dst, int64_t n, int num_threads = 0);

}  // namespace rlm
