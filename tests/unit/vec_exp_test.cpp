// cpu::exp_f32 (the attention softmax's vectorised exp) against double-precision std::exp over a
// sweep of the float range, its special values, the independence of an element's result from its
// position (full vectors and tails), cpu::exp_minus_max against double-precision sums and
// cpu::silu_mul_f32 against a double-precision loop.
#include "kernels/cpu/vec_exp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::TestRng;

// |y - ref| in units of the last place of the float nearest ref (subnormal ulp 2^-149).
double ulp_error(float y, double ref) {
  if (ref > std::numeric_limits<float>::max())
    return std::isinf(y) ? 0.0 : std::numeric_limits<double>::infinity();
  int e = 0;
  std::frexp(ref, &e);  // ref = f * 2^e, f in [0.5, 1)
  return std::fabs(static_cast<double>(y) - ref) / std::ldexp(1.0, std::max(e - 24, -149));
}

// Every 61st float of [-110, 89] (about 37 million, both signs; the step is odd so every
// low-bit pattern is visited): at most 1 ulp from the double-precision exp, rounded results
// included (e^-104 and below round to 0, e^88.8 and above overflow to +inf). A sweep of every
// float of that range gave a largest error of 0.990 ulp (at x = 70.403).
TEST(VecExp, WithinOneUlpOfDoubleExp) {
  constexpr uint32_t kStep = 61, kBatch = 1 << 16;
  std::vector<float> x(kBatch), y(kBatch);
  double worst = 0.0;
  float worst_x = 0.0f;
  for (uint32_t sign : {0u, 0x80000000u}) {
    const uint32_t end = std::bit_cast<uint32_t>(sign ? 110.0f : 89.0f);
    for (uint32_t b = 0; b < end;) {
      int64_t n = 0;
      for (; n < kBatch && b < end; ++n, b += kStep) x[n] = std::bit_cast<float>(b | sign);
      cpu::exp_f32(x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const double err = ulp_error(y[i], std::exp(static_cast<double>(x[i])));
        if (!(err <= worst)) worst = err, worst_x = x[i];
      }
    }
  }
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
}

TEST(VecExp, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-kInf,
                                kInf,
                                std::numeric_limits<float>::quiet_NaN(),
                                0.0f,
                                -0.0f,
                                -104.0f,
                                -1e30f,
                                88.8f,
                                1e30f,
                                -87.0f,
                                -100.0f,
                                88.7f,
                                std::numeric_limits<float>::denorm_min()};
  std::vector<float> y(x.size());
  cpu::exp_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], kInf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[4], 1.0f);
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[6], 0.0f);
  EXPECT_EQ(y[7], kInf);
  EXPECT_EQ(y[8], kInf);
  for (size_t i : {9u, 10u, 11u}) {  // a normal result, a subnormal one and the largest finite ones
    EXPECT_LE(ulp_error(y[i], std::exp(static_cast<double>(x[i]))), 1.0) << "x = " << x[i];
    EXPECT_GT(y[i], 0.0f);
    EXPECT_FALSE(std::isinf(y[i]));
  }
  EXPECT_EQ(y[12], 1.0f);
}

// An element's result is the same bits whether it is computed alone, in a full vector or in a
// tail, at any offset (a prefill row's keys start anywhere in its score buffer).
TEST(VecExp, ResultDoesNotDependOnPosition) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<float> x(64);
  for (float& v : x) v = static_cast<float>(rng.uniform(-30.0, 5.0));
  std::vector<float> alone(x.size());
  for (size_t i = 0; i < x.size(); ++i) cpu::exp_f32(&x[i], &alone[i], 1);
  for (int64_t off = 0; off < 9; ++off) {
    for (int64_t n = 0; off + n <= static_cast<int64_t>(x.size()); n += 5) {
      std::vector<float> y(x.begin(), x.end());  // in place, over a part of the buffer
      cpu::exp_f32(y.data() + off, y.data() + off, n);
      for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
        const float want = i >= off && i < off + n ? alone[i] : x[i];
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want))
            << "offset " << off << " n " << n << " element " << i;
      }
    }
  }
}

// exp_minus_max: the max, each output e^(s - max) with exp_f32's bits, and the sum within 1e-6
// (relative) of the double-precision sum of the double-precision exps.
TEST(VecExp, ExpMinusMaxMatchesDoubleReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {0, 1, 3, 7, 8, 9, 16, 31, 100, 513}) {
    SCOPED_TRACE(rlm::str("n ", n));
    std::vector<float> s(static_cast<size_t>(n));
    for (float& v : s) v = static_cast<float>(rng.uniform(-40.0, 40.0));
    const float want_max =
        n > 0 ? *std::max_element(s.begin(), s.end()) : -std::numeric_limits<float>::infinity();
    std::vector<float> shifted(s.size());
    double want_sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      shifted[i] = s[i] - want_max;
      want_sum += std::exp(static_cast<double>(s[i]) - want_max);
    }
    cpu::exp_f32(shifted.data(), shifted.data(), n);
    const cpu::MaxExpSum got = cpu::exp_minus_max(s.data(), n);
    EXPECT_EQ(got.max, want_max);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(s[i]), std::bit_cast<uint32_t>(shifted[i])) << i;
    if (n == 0) {
      EXPECT_EQ(got.sum, 0.0f);
    } else {
      EXPECT_LE(std::fabs(got.sum - want_sum) / want_sum, 1e-6);
    }
  }
}

// silu_mul_f32 (SwiGLU's product) against a double-precision loop: within 4 ulp of the f32 result
// (2^-21 relative; the exp's ulp and three rounded operations), plus 1e-30 absolute where e^-g
// overflows and the exact product is a tiny number that rounds to -0; and the same bits alone.
TEST(VecExp, SiluMulMatchesDoubleReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 1001;  // a tail after the full vectors
  std::vector<float> gate(n), up(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = static_cast<float>(rng.uniform(-100.0, 100.0) * (i % 3 == 0 ? 0.05 : 1.0));
    up[i] = rng.normal();
  }
  cpu::silu_mul_f32(gate.data(), up.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], want = g / (1.0 + std::exp(-g)) * up[i];
    EXPECT_LE(std::fabs(out[i] - want), std::ldexp(std::fabs(want), -21) + 1e-30)
        << "gate " << g << " up " << up[i];
    float alone = 0.0f;
    cpu::silu_mul_f32(&gate[i], &up[i], &alone, 1);
    ASSERT_EQ(std::bit_cast<uint32_t>(alone), std::bit_cast<uint32_t>(out[i])) << i;
  }
}

}  // namespace
}  // namespace rlm
