// Helpers shared by the ops_* tests: a fresh random seed per run (printed on failure), random
// tensors, NaN poisoning and the relative-L2 comparison against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace rlm::testing {

// Seeded from std::random_device; SCOPED_TRACE(rng.trace()) puts the seed in every failure.
class TestRng {
 public:
  TestRng() : seed_((static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()), gen_(seed_) {}
  uint64_t seed() const { return seed_; }
  std::string trace() const { return "random seed " + std::to_string(seed_); }
  std::mt19937_64& gen() { return gen_; }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  int64_t randint(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }  // [lo, hi]
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen_); }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

// A contiguous f32 tensor of N(0, scale^2) values.
inline Tensor random_normal(TestRng& rng, Shape shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.normal() * scale;
  return t;
}

inline void poison(const Tensor& t) { t.fill_(std::numeric_limits<double>::quiet_NaN()); }

// A CPU f32 tensor [K, ...] stacking K CPU tensors of one shape.
inline Tensor stack(const std::vector<Tensor>& parts) {
  Shape shape = parts.at(0).shape();
  shape.insert(shape.begin(), static_cast<int64_t>(parts.size()));
  Tensor out = Tensor::empty(shape, DType::kF32);
  for (size_t k = 0; k < parts.size(); ++k) out.select(0, static_cast<int64_t>(k)).copy_(parts[k]);
  return out;
}

// Reads element i (row-major over the shape) of a CPU float tensor of any strides as double.
inline double element(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.size(d)) * t.stride(d);
    i /= t.size(d);
  }
  const char* base = static_cast<const char*>(t.data_ptr()) + off * static_cast<int64_t>(t.element_size());
  switch (t.dtype()) {
    case DType::kF32: return *reinterpret_cast<const float*>(base);
    case DType::kBF16: return bf16_to_f32(*reinterpret_cast<const bf16*>(base));
    case DType::kF16: return f16_to_f32(*reinterpret_cast<const f16*>(base));
    default: ADD_FAILURE() << "element(): not a float tensor " << t.describe(); return 0;
  }
}

inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = element(t, i);
  return v;
}

// ||got - want|| / max(||want||, tiny); NaN anywhere in `got` gives +inf.
inline double rel_l2(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

inline double rel_l2(const Tensor& got, const std::vector<double>& want) { return rel_l2(to_doubles(got), want); }

// Element-wise bit equality of two f32 tensors of the same shape (NaN == NaN when same bits).
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = static_cast<float>(element(a, i)), y = static_cast<float>(element(b, i));
    if (std::memcmp(&x, &y, 4) != 0) return false;
  }
  return true;
}

// Runs `fn` and returns the rlm::Error message it throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace rlm::testing
