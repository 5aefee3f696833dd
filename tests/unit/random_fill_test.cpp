// fill_uniform_counter (core/random_fill.h: the dummy weights' values) and bench::random_host (the
// random caches and activations of `bench attention` / `bench gemv`): the same values for any
// thread count, a different tensor per key, uniform on [-scale, scale), and each dtype the f32
// values rounded (across the 65,536-element chunk boundaries the threads split at).
#include "core/random_fill.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/cuda_timing.h"
#include "core/dtype.h"

namespace rlm::bench {
namespace {

constexpr int64_t kRows = 3, kCols = 70001;  // 210,003 elements: 4 chunks, the last one partial

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  return {p, p + t.numel() * t.element_size()};
}

TEST(BenchRandom, SameValuesForAnyThreadCount) {
  const Tensor one = random_host(42, {kRows, kCols}, DType::kF32, 1);
  for (int threads : {2, 3, 7, 0}) {
    EXPECT_EQ(bytes_of(random_host(42, {kRows, kCols}, DType::kF32, threads)), bytes_of(one))
        << threads << " threads";
  }
}

TEST(BenchRandom, KeysGiveDifferentTensors) {
  const Tensor a = random_host(1, {kRows, kCols}, DType::kF32),
               b = random_host(2, {kRows, kCols}, DType::kF32);
  int64_t same = 0;
  for (int64_t i = 0; i < a.numel(); ++i) same += a.data<float>()[i] == b.data<float>()[i];
  EXPECT_LT(same, 10);  // 24-bit values: ~0.01 expected coincidences
}

TEST(RandomFill, ScaleAndThreadsGiveTheSameValuesScaled) {
  const int64_t n = kRows * kCols;
  std::vector<float> one(static_cast<size_t>(n)), many(static_cast<size_t>(n));
  fill_uniform_counter(5, 1.0f, DType::kF32, one.data(), n, 1);
  fill_uniform_counter(5, 0.25f, DType::kF32, many.data(), n, 5);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(many[i], one[i] * 0.25f) << i;  // a power of two: exact
  // random_host is the same fill at scale 1.
  EXPECT_EQ(bytes_of(random_host(5, {kRows, kCols}, DType::kF32, 2)),
            std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(one.data()),
                                 reinterpret_cast<const uint8_t*>(one.data()) + n * sizeof(float)));
}

TEST(BenchRandom, UniformOnMinusOneToOne) {
  const Tensor t = random_host(7, {kRows, kCols}, DType::kF32);
  const float* p = t.data<float>();
  const int64_t n = t.numel();
  double sum = 0, sq = 0;
  int64_t below_zero = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(p[i], -1.0f);
    ASSERT_LT(p[i], 1.0f);
    sum += p[i];
    sq += static_cast<double>(p[i]) * p[i];
    below_zero += p[i] < 0.0f;
  }
  // Mean 0 and variance 1/3; bounds at 6 standard errors of each estimate.
  const double mean = sum / static_cast<double>(n), var = sq / static_cast<double>(n) - mean * mean;
  EXPECT_NEAR(mean, 0.0, 6.0 * std::sqrt(1.0 / 3.0 / static_cast<double>(n)));
  EXPECT_NEAR(var, 1.0 / 3.0, 6.0 * std::sqrt(4.0 / 45.0 / static_cast<double>(n)));
  EXPECT_NEAR(static_cast<double>(below_zero) / static_cast<double>(n), 0.5,
              6.0 * 0.5 / std::sqrt(static_cast<double>(n)));
}

TEST(BenchRandom, EachDtypeIsTheF32ValuesRounded) {
  const Tensor f = random_host(9, {kRows, kCols}, DType::kF32, 4);
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    const Tensor t = random_host(9, {kRows, kCols}, dt, 3);
    std::vector<uint8_t> want(static_cast<size_t>(f.numel() * dtype_size(dt)));
    convert_from_f32(f.data<float>(), want.data(), dt, static_cast<size_t>(f.numel()));
    EXPECT_EQ(bytes_of(t), want) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace rlm::bench
