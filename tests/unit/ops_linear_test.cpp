// ops::linear (OpenBLAS sgemm, 16-bit weights widened block by block) against a double reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "kernels/cpu/linear.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::random_normal;
using testing::TestRng;

// f32 accumulation error grows like sqrt(k) * eps times the sum of the magnitudes of the terms
// (a dot product that cancels to near zero has a large *relative* error by nature): each element
// must satisfy |out - ref| <= tolerance(k) * sum_c |x_c * w_c| (+ |bias|).
double tolerance(int64_t k) { return 1e-6 * std::sqrt(static_cast<double>(k)) + 1e-6; }

struct Ref {
  std::vector<double> out;  // exact (double) result
  std::vector<double> mag;  // sum of |terms| per element
};

Ref ref_linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  Ref r{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? testing::element(*bias, j) : 0.0;
      double a = std::abs(s);
      for (int64_t c = 0; c < k; ++c) {
        const double t = static_cast<double>(x.at<float>({i, c})) * testing::element(w, j * k + c);
        s += t;
        a += std::abs(t);
      }
      r.out[i * n + j] = s;
      r.mag[i * n + j] = a;
    }
  }
  return r;
}

// The largest |out - ref| / magnitude over all elements.
double worst_scaled_error(const Tensor& out, const Ref& r) {
  double worst = 0.0;
  for (size_t i = 0; i < r.out.size(); ++i) {
    const double got = out.data<float>()[i];
    if (std::isnan(got)) return INFINITY;
    worst = std::max(worst, std::abs(got - r.out[i]) / std::max(r.mag[i], 1e-30));
  }
  return worst;
}

TEST(OpsLinear, MatchesDoubleReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t m : {1, 3, 17}) {
    for (int64_t k : {1, 17, 129, 576}) {
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{129}, 2 * cpu::kLinearBlockRows + 5}) {
        const Tensor x = random_normal(rng, {m, k});
        const Tensor w = random_normal(rng, {n, k}, 0.1f);
        const Tensor bias = random_normal(rng, {n});
        for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
          const Tensor wc = w.to(wd);
          for (bool with_bias : {false, true}) {
            Tensor out = Tensor::empty({m, n}, DType::kF32);
            testing::poison(out);
            ops::linear(x, wc, with_bias ? std::optional<Tensor>(bias) : std::nullopt, out);
            const Ref want = ref_linear(x, wc, with_bias ? &bias : nullptr);
            EXPECT_LE(worst_scaled_error(out, want), tolerance(k))
                << "m " << m << " k " << k << " n " << n << " " << dtype_name(wd) << " bias " << with_bias;
          }
        }
      }
    }
  }
}

TEST(OpsLinear, SixteenBitWeightsEqualTheirF32ValuesBitForBit) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t m = 5, k = 96, n = 3 * cpu::kLinearBlockRows + 17;
  const Tensor x = random_normal(rng, {m, k});
  for (DType wd : {DType::kBF16, DType::kF16}) {
    const Tensor w16 = random_normal(rng, {n, k}, 0.1f).to(wd);
    const Tensor w32 = w16.to(DType::kF32);
    const Tensor bias16 = random_normal(rng, {n}).to(wd);
    Tensor a = Tensor::empty({m, n}, DType::kF32), b = Tensor::empty({m, n}, DType::kF32);
    ops::linear(x, w16, bias16, a);
    ops::linear(x, w32, bias16.to(DType::kF32), b);
    EXPECT_TRUE(testing::bitwise_equal(a, b)) << dtype_name(wd);
  }
}

TEST(OpsLinear, StridedInputAndOutputRows) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t m = 7, k = 33, n = 19;
  // x = columns [5, 5 + k) of a wider buffer; out = columns [2, 2 + n) of another.
  const Tensor xbuf = random_normal(rng, {m, k + 11});
  const Tensor x = xbuf.slice(1, 5, 5 + k);
  const Tensor w = random_normal(rng, {n, k}).to(DType::kBF16);
  Tensor obuf = Tensor::empty({m, n + 4}, DType::kF32);
  testing::poison(obuf);
  Tensor out = obuf.slice(1, 2, 2 + n);
  ops::linear(x, w, std::nullopt, out);
  EXPECT_LE(worst_scaled_error(out.contiguous(), ref_linear(x.contiguous(), w, nullptr)), tolerance(k));
  for (int64_t i = 0; i < m; ++i) {
    EXPECT_TRUE(std::isnan(obuf.at<float>({i, 0})) && std::isnan(obuf.at<float>({i, n + 3})));
  }
  // The compacted input gives the same bits.
  Tensor out2 = Tensor::empty({m, n}, DType::kF32);
  ops::linear(x.contiguous(), w, std::nullopt, out2);
  EXPECT_TRUE(testing::bitwise_equal(out, out2));
}

TEST(OpsLinear, ShapeErrorsNameTheTensors) {
  const Tensor x = Tensor::zeros({2, 4}, DType::kF32);
  const Tensor w = Tensor::zeros({3, 5}, DType::kBF16);
  Tensor out = Tensor::zeros({2, 3}, DType::kF32);
  std::string msg = testing::error_of([&] { ops::linear(x, w, std::nullopt, out); });
  EXPECT_NE(msg.find("ops::linear: weight bf16[3, 5] cpu: dimension 1 must be k (x.size(1)) = 4"), std::string::npos)
      << msg;
  msg = testing::error_of(
      [&] { ops::linear(x, Tensor::zeros({3, 4}, DType::kF32), Tensor::zeros({4}, DType::kF32), out); });
  EXPECT_NE(msg.find("bias f32[4] cpu: dimension 0 must be n"), std::string::npos) << msg;
  msg = testing::error_of([&] { ops::linear(x.to(DType::kBF16), Tensor::zeros({3, 4}, DType::kF32), std::nullopt, out); });
  EXPECT_NE(msg.find("x bf16[2, 4] cpu must have dtype f32"), std::string::npos) << msg;
}

// ops::fused_linear checks its arguments as linear() does (plus the SiLU-and-mul and norm shapes)
// on every device; on the CPU it has no kernel: it returns false and writes nothing (callers run
// the ops in turn; the CUDA kernels are tested in tests/cuda/fused_linear_cuda_test.cpp).
TEST(OpsFusedLinear, CpuRunsNothingAndBadArgumentsAreErrors) {
  TestRng rng;
  const Tensor x = random_normal(rng, {2, 8}), w = random_normal(rng, {6, 8}).to(DType::kBF16);
  const Tensor w_odd = random_normal(rng, {5, 8}).to(DType::kBF16);
  const Tensor norm8 = random_normal(rng, {8}), norm4 = random_normal(rng, {4});
  const Tensor out = Tensor::zeros({2, 6}, DType::kF32), half = Tensor::zeros({2, 3}, DType::kF32);
  EXPECT_FALSE(ops::fused_linear(x, w, std::nullopt, out, {&norm8, 1e-6f, false, true}));
  EXPECT_FALSE(ops::fused_linear(x, w, std::nullopt, half, {&norm8, 1e-6f, true, false}));
  for (const Tensor* t : {&out, &half}) {
    for (int64_t i = 0; i < t->numel(); ++i) ASSERT_EQ(t->data<float>()[i], 0.0f);
  }
  struct Case {
    std::function<void()> call;
    const char* error;
  };
  const Case cases[] = {
      {[&] { ops::fused_linear(x, w, std::nullopt, out, {.silu_and_mul = true}); },
       "dimension 1 must be n / 2 (weight.size(0) / 2)"},
      {[&] { ops::fused_linear(x, w_odd, std::nullopt, half, {.silu_and_mul = true}); },
       "SiLU-and-mul needs an even number of rows"},
      {[&] {
         ops::fused_linear(x, w, std::nullopt, out, {&norm4, 1e-6f});
       },
       "dimension 0 must be the row length d"},
      {[&] { ops::fused_linear(x, w, std::nullopt, half, {}); }, "dimension 1 must be n (weight.size(0))"},
      {[&] { ops::fused_linear(x.to(DType::kBF16), w, std::nullopt, out, {}); }, "must have dtype f32"},
  };
  for (const Case& c : cases) {
    const std::string msg = testing::error_of(c.call);
    EXPECT_NE(msg.find(c.error), std::string::npos) << msg;
    EXPECT_NE(msg.find("fused_linear"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace rlm
