// CUDA linear (cuBLAS, and the GEMV kernel for m <= 8 with 16-bit weights) and sampling against their
// CPU twins on fresh random inputs.
// Tolerances: f32 weights rel. L2 <= 1e-5 (f32 GEMM, no TF32); bf16/f16 weights: the GPU rounds x
// to the weight dtype and accumulates in f32, so the CPU twin runs on x rounded the same way and
// only the summation order differs: rel. L2 <= 1e-4 (a relative measure on single outputs with
// cancellation would otherwise compare rounding noise, not the kernel); argmax / greedy sampling:
// identical ids; seeded sampling: identical ids to the CPU on logits built on a coarse grid so that
// no probability sits within rounding of a top-p / min-p / draw threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/linear.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::compare_poisoned;
using testing::poisoned;
using testing::random_dtype;
using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

// |t| elementwise, same dtype (exact for f32/bf16/f16), contiguous.
Tensor abs_copy(const Tensor& t) {
  Tensor f = t.to(DType::kF32).contiguous().clone();
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] = std::abs(f.data<float>()[i]);
  return f.to(t.dtype());
}

// Where the operands sit in their buffers: x row stride k + x_pad starting at column x_off, weight
// row stride k + w_pad starting at column w_off (w_pad % 8 == 0 and w_off == 0 give the 16-byte
// aligned rows the GEMV path needs), out row stride n + 2 starting at column 1.
struct LinearLayout {
  int64_t x_pad = 3, x_off = 2;
  int64_t w_pad = 1, w_off = 0;
};

void check_linear(TestRng& rng, int64_t m, int64_t k, int64_t n, DType wd, std::optional<DType> bias_dt,
                  const LinearLayout& lay = {}, std::optional<bool> expect_gemv = std::nullopt) {
  SCOPED_TRACE(str("m ", m, " k ", k, " n ", n, " weight ", dtype_name(wd), " bias ",
                   bias_dt ? dtype_name(*bias_dt) : "none", " ldw ", k + lay.w_pad, " w_off ", lay.w_off));
  // Per element: |gpu - cpu| <= tol * sum_c |x_c w_c| (+ |bias|) — both sides accumulate in f32 in
  // different orders (cuBLAS may split k), so the bound scales with the terms' magnitudes, not the
  // result's (a dot product that cancels is ill-conditioned).
  const double tol = 2e-6 * std::sqrt(static_cast<double>(k)) + 1e-6;
  const Tensor xb = random_normal(rng, {m, k + lay.x_pad});
  const Tensor x = xb.slice(1, lay.x_off, lay.x_off + k);
  const Tensor wb = random_dtype(rng, {n, k + lay.w_pad}, wd, 0.5f);
  const Tensor w = wb.slice(1, lay.w_off, lay.w_off + k);
  std::optional<Tensor> bias, gbias;
  if (bias_dt) {
    bias = random_dtype(rng, {n}, *bias_dt);
    gbias = to_gpu(*bias);
  }
  const Tensor ob = poisoned({m, n + 2}, DType::kF32);  // out: poisoned, row stride n + 2
  const Tensor gob = to_gpu(ob), gxb = to_gpu(xb), gwb = to_gpu(wb);
  // The CPU twin sees x as the GPU does: rounded to the weight dtype when that is 16-bit.
  const Tensor x_ref = wd == DType::kF32 ? x : x.to(wd).to(DType::kF32);
  ops::linear(x_ref, w, bias, ob.slice(1, 1, 1 + n));
  const Tensor gw = gwb.slice(1, lay.w_off, lay.w_off + k);
  if (expect_gemv) {
    EXPECT_EQ(cuda::linear_uses_gemv(gw.device().index, m, k, gw.data_ptr(), wd, gw.stride(0)), *expect_gemv);
  }
  ops::linear(gxb.slice(1, lay.x_off, lay.x_off + k), gw, gbias, gob.slice(1, 1, 1 + n));
  const Tensor got = to_cpu(gob);
  EXPECT_EQ(compare_poisoned(got, ob, INFINITY), "");  // the padding columns stay poisoned
  Tensor mag = Tensor::empty({m, n}, DType::kF32);
  ops::linear(abs_copy(x_ref), abs_copy(w), bias ? std::optional<Tensor>(abs_copy(*bias)) : std::nullopt, mag);
  double worst = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double d = std::abs(static_cast<double>(got.at<float>({i, 1 + j})) - ob.at<float>({i, 1 + j}));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d / std::max<double>(mag.at<float>({i, j}), 1e-30));
    }
  }
  EXPECT_LE(worst, tol);
}

TEST(OpsCudaLinear, MatchesCpuForEveryWeightDtype) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 3, 17, 129}) {
      for (int64_t k : {1, 17, 129, 4097}) {
        for (int64_t n : {1, 3, 129, 257}) {
          check_linear(rng, m, k, n, wd, std::nullopt);
        }
      }
    }
    for (DType bd : {DType::kF32, DType::kBF16, DType::kF16}) check_linear(rng, 5, 64, 33, wd, bd);
  }
}

TEST(OpsCudaLinear, LargerShapeWithBias) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  check_linear(rng, 300, 1024, 2048, DType::kF32, DType::kF32);
  check_linear(rng, 300, 1024, 2048, DType::kBF16, DType::kBF16);
  // x rows on 16 bytes (row stride k + 8 from column 4): the float4 conversion to the weight dtype.
  LinearLayout aligned;
  aligned.x_pad = 8;
  aligned.x_off = 4;
  check_linear(rng, 300, 1024, 2048, DType::kBF16, DType::kBF16, aligned);
  check_linear(rng, 77, 1028, 520, DType::kF16, std::nullopt, aligned);
}

// Small m with 16-bit weights: the GEMV kernels (aligned weight rows, x of m * k 16-bit values
// within the shared-memory limit; 3-8 rows with k % 32 == 0 on the tensor cores, the rest on the
// CUDA cores) and the cuBLAS fallback (misaligned rows, or x too large), all against the CPU twin
// with the same bound; x and out strided, bias of every dtype or none.
TEST(OpsCudaLinear, SmallMGemvAndFallbackMatchCpu) {
  RLM_REQUIRE_CUDA();
  ASSERT_TRUE(cuda::linear_gemv_enabled()) << "run without RADIXLM_LINEAR_GEMV=0";
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t max_x_bytes = cuda::linear_gemv_max_x_bytes(testing::gpu().index);
  ASSERT_GE(max_x_bytes, 48 * 1024);
  auto fits = [&](int64_t m, int64_t k) { return m * k * 2 <= max_x_bytes; };
  const std::optional<DType> biases[] = {std::nullopt, DType::kF32, DType::kBF16, DType::kF16};
  int case_index = 0;
  for (DType wd : {DType::kBF16, DType::kF16}) {
    for (int64_t m : {1, 2, 3, 5, 8}) {
      for (int64_t k : {8, 16, 40, 4096, 4104, 14336}) {
        for (int64_t n : {1, 7, 129, 4096}) {
          // The large weights (4096 rows x >= 4096 columns) are slow to check on the host: only at
          // m = 1 and 8 for bf16, m = 1 for f16 (the test must finish in the 150 s per binary).
          if (n == 4096 && k >= 4096 && !(m == 1 || (m == 8 && wd == DType::kBF16))) continue;
          const std::optional<DType> bd = biases[case_index++ % 4];
          // Aligned rows (row stride k + 8, a 16-byte multiple): the kernel when x fits.
          check_linear(rng, m, k, n, wd, bd, LinearLayout{3, 2, 8, 0}, fits(m, k));
          // The same row stride, the view starting one element in: rows not 16-byte aligned, always
          // the fallback.
          if (n != 4096 || k <= 4104) check_linear(rng, m, k, n, wd, bd, LinearLayout{3, 2, 8, 1}, false);
        }
      }
    }
  }
  // A view starting 8 elements into its rows is still aligned; row strides that are not multiples of
  // 8 elements, k % 8 != 0 and m > 8 take the fallback.
  check_linear(rng, 4, 256, 33, DType::kBF16, DType::kF32, LinearLayout{0, 0, 16, 8}, true);
  check_linear(rng, 4, 256, 33, DType::kBF16, std::nullopt, LinearLayout{0, 0, 4, 0}, false);
  check_linear(rng, 2, 36, 33, DType::kF16, std::nullopt, LinearLayout{0, 0, 4, 0}, false);
  check_linear(rng, 9, 256, 33, DType::kBF16, std::nullopt, LinearLayout{1, 0, 8, 0}, false);
  check_linear(rng, 8, 16384, 7, DType::kBF16, DType::kBF16, LinearLayout{1, 0, 8, 0}, fits(8, 16384));
  const int64_t k_max = max_x_bytes / 2 / 8 / 8 * 8;  // the largest k (multiple of 8) that fits at m = 8
  check_linear(rng, 8, k_max, 5, DType::kF16, std::nullopt, LinearLayout{1, 0, 8, 0}, true);
  check_linear(rng, 8, k_max + 8, 5, DType::kF16, std::nullopt, LinearLayout{1, 0, 8, 0}, false);
  check_linear(rng, 1, 256, 33, DType::kF32, std::nullopt, LinearLayout{1, 0, 8, 0}, false);
  // x rows on 16 bytes (row stride k + 4 from column 0): the tensor-core kernel's vector loads of x.
  for (int64_t m : {1, 3, 8}) {
    check_linear(rng, m, 4096, 129, DType::kBF16, DType::kF32, LinearLayout{4, 0, 8, 0}, true);
    check_linear(rng, m, 1024, 40, DType::kF16, std::nullopt, LinearLayout{4, 0, 8, 0}, true);
  }
}

TEST(OpsCudaLinear, GemvSwitchSelectsCublas) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const bool was = cuda::linear_gemv_enabled();
  cuda::set_linear_gemv_enabled(false);
  check_linear(rng, 1, 4096, 129, DType::kBF16, DType::kBF16, LinearLayout{3, 2, 8, 0}, false);
  cuda::set_linear_gemv_enabled(true);
  check_linear(rng, 1, 4096, 129, DType::kBF16, DType::kBF16, LinearLayout{3, 2, 8, 0}, true);
  cuda::set_linear_gemv_enabled(was);
}

// Logits on a coarse grid: with p a random permutation of 0..v-1, value = shift - 0.37 * (p % 64)
// - 0.0813 * (p / 64): no two tokens within 1e-4 of each other near the top, and the mass sits in
// ~40 tokens, so thresholds never fall within f32 rounding of a cumulative sum in practice.
Tensor grid_logits(TestRng& rng, int64_t n, int64_t v, int64_t ld) {
  Tensor t = Tensor::empty({n, ld}, DType::kF32);
  t.fill_(std::numeric_limits<double>::quiet_NaN());  // outside the view: must never be read as a token
  std::vector<int64_t> perm(static_cast<size_t>(v));
  for (int64_t i = 0; i < n; ++i) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen());
    const float shift = static_cast<float>(rng.uniform(-3, 3));
    for (int64_t j = 0; j < v; ++j) t.at<float>({i, j}) = shift - 0.37f * static_cast<float>(perm[j] % 64) -
                                                        0.0813f * static_cast<float>(perm[j] / 64);
  }
  return t;
}

std::vector<ops::SamplingRow> random_rows(TestRng& rng, int64_t n, int64_t v) {
  std::vector<ops::SamplingRow> rows(static_cast<size_t>(n));
  const float temps[] = {0.0f, 0.6f, 1.0f, 1.7f};
  const int32_t top_ks[] = {-1, 1, 2, 5, 40, 1000000};
  const float top_ps[] = {1.0f, 0.9f, 0.5f, 0.2f};
  const float min_ps[] = {0.0f, 0.0f, 0.05f, 0.3f};
  for (int64_t i = 0; i < n; ++i) {
    ops::SamplingRow& r = rows[i];
    r.temperature = temps[rng.randint(0, 3)];
    r.top_k = top_ks[rng.randint(0, 5)];
    r.top_p = top_ps[rng.randint(0, 3)];
    r.min_p = min_ps[rng.randint(0, 3)];
    r.seed = rng.gen()();
    r.step = static_cast<uint64_t>(rng.randint(0, 1000));
    (void)v;
  }
  return rows;
}

TEST(OpsCudaSample, SameTokensAsCpuForGreedyAndSeededRows) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  // Rows are v + 3 apart: 16-byte aligned for v = 1, 17, 129, 4097 and 65537 (the kernels' float4
  // path; 65537 runs its unrolled loop and a scalar tail), unaligned for the others.
  for (int64_t v : {1, 3, 17, 129, 4097, 50000, 65537, 256000}) {
    const int64_t n = v >= 50000 ? 24 : 64;
    SCOPED_TRACE(str("v ", v));
    const Tensor logits_base = grid_logits(rng, n, v, v + 3);
    const Tensor logits = logits_base.slice(1, 0, v);
    const std::vector<ops::SamplingRow> rows = random_rows(rng, n, v);
    Tensor want = Tensor::empty({n}, DType::kI32);
    ops::sample(logits, rows, want);
    const Tensor got = to_gpu(poisoned({n}, DType::kI32));
    ops::sample(to_gpu(logits_base).slice(1, 0, v), rows, got);
    const std::vector<int32_t> g = testing::int_values(got), w = testing::int_values(want);
    for (int64_t i = 0; i < n; ++i) {
      const ops::SamplingRow& r = rows[i];
      EXPECT_EQ(g[i], w[i]) << "row " << i << ": T " << r.temperature << " top_k " << r.top_k << " top_p "
                            << r.top_p << " min_p " << r.min_p << " seed " << r.seed << " step " << r.step;
    }
  }
}

TEST(OpsCudaSample, GreedyEqualsArgmaxOnRandomLogits) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t v : {1, 17, 4097, 151936}) {
    const int64_t n = 5;
    const Tensor logits = to_gpu(random_normal(rng, {n, v}, 4.0f));
    std::vector<ops::SamplingRow> rows(static_cast<size_t>(n));
    rows[1].top_k = 1;
    rows[2].temperature = 1e-7f;
    for (auto& r : rows) {
      if (r.top_k != 1 && r.temperature != 1e-7f) r.temperature = 0.0f;
      r.seed = rng.gen()();
    }
    const Tensor got = to_gpu(poisoned({n}, DType::kI32)), am = to_gpu(poisoned({n}, DType::kI32));
    ops::sample(logits, rows, got);
    ops::argmax(logits, am);
    EXPECT_EQ(testing::int_values(got), testing::int_values(am)) << "v " << v;
  }
}

TEST(OpsCudaSample, SeededDrawsFollowTheDistribution) {
  // Many steps of one row on the GPU: the empirical frequency of each token of a small vocabulary
  // matches the CPU's frequencies on the same (seed, step) draws exactly (same tokens).
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t v = 6, steps = 512;
  std::vector<float> vals = {0.0f, -0.5f, -1.1f, -1.9f, -3.0f, -4.4f};
  std::vector<float> flat;
  for (int64_t s = 0; s < steps; ++s) flat.insert(flat.end(), vals.begin(), vals.end());
  const Tensor logits = Tensor::from_vector(flat, {steps, v});
  std::vector<ops::SamplingRow> rows(static_cast<size_t>(steps));
  const uint64_t seed = rng.gen()();
  for (int64_t s = 0; s < steps; ++s) {
    rows[s].seed = seed;
    rows[s].step = static_cast<uint64_t>(s);
    rows[s].top_p = s % 2 == 0 ? 1.0f : 0.95f;
  }
  Tensor want = Tensor::empty({steps}, DType::kI32);
  ops::sample(logits, rows, want);
  const Tensor got = to_gpu(poisoned({steps}, DType::kI32));
  ops::sample(to_gpu(logits), rows, got);
  EXPECT_EQ(testing::int_values(got), testing::int_values(want));
  std::vector<int> counts(static_cast<size_t>(v), 0);
  for (int32_t t : testing::int_values(got)) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, v);
    ++counts[t];
  }
  EXPECT_GT(counts[0], counts[3]);  // the most likely token is drawn more often than a tail one
}

}  // namespace
}  // namespace rlm
