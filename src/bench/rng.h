// A small seeded random source for the benchmark's datasets and arrival schedule. Built on
// std::mt19937_64 (whose output sequence the standard fixes) with our own integer/real/exponential
// transforms, so a seed gives the same prompts and schedule with any standard library.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "core/check.h"

namespace rlm::bench {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t next_u64() { return engine_(); }

  // Uniform integer in [lo, hi] (both inclusive), without modulo bias.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    RLM_CHECK_LE(lo, hi);
    const uint64_t range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
    if (range == 0) return static_cast<int64_t>(next_u64());  // the full 64-bit range
    const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                           std::numeric_limits<uint64_t>::max() % range;
    uint64_t x = next_u64();
    while (x >= limit) x = next_u64();
    return lo + static_cast<int64_t>(x % range);
  }

  // Uniform real in [0, 1) with 53 random bits.
  double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Exponential with the given rate (mean 1/rate), by inversion.
  double exponential(double rate) {
    RLM_CHECK(rate > 0.0) << "exponential rate must be positive, got " << rate;
    return -std::log1p(-uniform01()) / rate;
  }

  // Gamma(shape, scale) through the standard library (used only for burstiness != 1).
  double gamma(double shape, double scale) {
    std::gamma_distribution<double> dist(shape, scale);
    return dist(engine_);
  }

  // Fisher-Yates shuffle with uniform_int.
  template <typename T>
  void shuffle(T& items) {
    for (int64_t i = static_cast<int64_t>(items.size()) - 1; i > 0; --i) {
      int64_t j = uniform_int(0, i);
      std::swap(items[i], items[j]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

}  // namespace rlm::bench
