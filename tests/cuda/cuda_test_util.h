// Helpers for the CUDA op tests: skip without a device, host <-> device copies, poisoned buffers
// and a comparison that also demands that poisoned (unwritten) elements stay exactly where the CPU
// twin left them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "unit/ops_test_util.h"

namespace rlm::testing {

#define RLM_REQUIRE_CUDA()                                                       \
  do {                                                                           \
    if (::rlm::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";       \
  } while (0)

inline Device gpu() { return Device::cuda(0); }
inline Tensor to_gpu(const Tensor& t) { return t.to(gpu()); }
inline Tensor to_cpu(const Tensor& t) { return t.to(Device::cpu()); }

// A contiguous CPU tensor of `dtype` filled with N(0, scale^2) values (rounded to dtype).
inline Tensor random_dtype(TestRng& rng, Shape shape, DType dtype, float scale = 1.0f) {
  return random_normal(rng, std::move(shape), scale).to(dtype);
}

// A CPU tensor of `shape` whose every element is NaN (float dtypes) or -1 (ints: 0xFF bytes).
inline Tensor poisoned(Shape shape, DType dtype) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  if (is_floating(dtype)) {
    poison(t);
  } else {
    t.fill_(-1);
  }
  return t;
}

// Compares two CPU float tensors of the same shape element by element: NaN positions must match
// exactly (poison left in place on both sides, or written on neither); over the other elements the
// relative L2 error must be <= tol. Returns "" when equal enough, else a description.
inline std::string compare_poisoned(const Tensor& got, const Tensor& want, double tol) {
  if (got.shape() != want.shape()) return "shape " + got.describe() + " vs " + want.describe();
  double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = element(got, i), w = element(want, i);
    if (std::isnan(w) != std::isnan(g)) {
      return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", want " + std::to_string(w);
    }
    if (std::isnan(w)) continue;
    if (std::isinf(g) || std::isinf(w)) {
      if (g != w) return "element " + std::to_string(i) + ": inf mismatch";
      continue;
    }
    num += (g - w) * (g - w);
    den += w * w;
  }
  const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  if (!(rel <= tol)) return "relative L2 " + std::to_string(rel) + " > " + std::to_string(tol);
  return "";
}

inline std::vector<int32_t> int_values(const Tensor& t) {  // any shape, row-major
  const Tensor c = to_cpu(t).contiguous();
  std::vector<int32_t> v(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = c.data<int32_t>()[i];
  return v;
}

}  // namespace rlm::testing
