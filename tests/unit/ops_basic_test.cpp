// embedding, rms_norm, fused_add_rms_norm, silu_and_mul, gelu_tanh_and_mul, scale, soft_cap, store_kv_cache, softmax, log_softmax and
// argmax against straightforward double-precision references, on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::poison;
using testing::random_normal;
using testing::rel_l2;
using testing::TestRng;
using testing::to_doubles;

constexpr double kF32Tol = 1e-5;  // rel. L2 of f32 kernels vs the double reference

std::vector<double> ref_rms_norm(const std::vector<double>& x, const std::vector<double>& w, int64_t d, double eps) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int64_t k = 0; k < d; ++k) ss += x[r * d + k] * x[r * d + k];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t k = 0; k < d; ++k) out[r * d + k] = x[r * d + k] * inv * w[k];
  }
  return out;
}

TEST(OpsEmbedding, GathersRowsAndConverts) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t hidden : {1, 3, 17, 129}) {
    const int64_t vocab = 37, n = 11;
    Tensor w = random_normal(rng, {vocab, hidden});
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng.randint(0, vocab - 1));
    ids[0] = 0;
    ids[1] = vocab - 1;
    Tensor ids_t = Tensor::from_vector(ids);
    for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
      Tensor wc = w.to(wd);
      Tensor out = Tensor::empty({n, hidden}, DType::kF32);
      poison(out);
      ops::embedding(ids_t, wc, out);
      // The f32 values of the stored weight rows, exactly.
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < hidden; ++k) {
          ASSERT_EQ(out.at<float>({i, k}), static_cast<float>(testing::element(wc, ids[i] * hidden + k)))
              << "hidden " << hidden << " dtype " << dtype_name(wd) << " row " << i;
        }
      }
    }
    // bf16 output from an f32 table rounds like Tensor::to.
    Tensor out16 = Tensor::empty({n, hidden}, DType::kBF16);
    ops::embedding(ids_t, w, out16);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < hidden; ++k) {
        ASSERT_EQ(out16.at<bf16>({i, k}).bits, f32_to_bf16(w.at<float>({ids[i], k})).bits);
      }
    }
  }
}

TEST(OpsEmbedding, OutOfRangeIdIsAnErrorAndWritesNothing) {
  Tensor w = Tensor::zeros({10, 4}, DType::kF32);
  Tensor out = Tensor::empty({3, 4}, DType::kF32);
  poison(out);
  for (int32_t bad : {10, -1}) {
    const std::string msg = testing::error_of([&] { ops::embedding(Tensor::from_vector<int32_t>({1, bad, 2}), w, out); });
    EXPECT_NE(msg.find("token id " + std::to_string(bad) + " at position 1"), std::string::npos) << msg;
    EXPECT_TRUE(std::isnan(out.at<float>({0, 0})));
  }
  const std::string msg = testing::error_of([&] { ops::embedding(Tensor::from_vector<int32_t>({1, 2}), w, out); });
  EXPECT_NE(msg.find("out f32[3, 4] cpu"), std::string::npos) << msg;
}

TEST(OpsRmsNorm, MatchesDoubleReferenceOnOddSizes) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t d : {1, 3, 17, 129, 576}) {
    for (int64_t n : {1, 3, 17}) {
      Tensor x = random_normal(rng, {n, d}, 3.0f);
      Tensor w = random_normal(rng, {d});
      for (DType wd : {DType::kF32, DType::kBF16}) {
        Tensor wc = w.to(wd);
        const auto want = ref_rms_norm(to_doubles(x), to_doubles(wc), d, 1e-6);
        Tensor out = Tensor::empty({n, d}, DType::kF32);
        poison(out);
        ops::rms_norm(x, wc, 1e-6f, out);
        EXPECT_LE(rel_l2(out, want), kF32Tol) << "n " << n << " d " << d << " " << dtype_name(wd);
        // In place gives the same bits.
        Tensor xi = x.clone();
        ops::rms_norm(xi, wc, 1e-6f, xi);
        EXPECT_TRUE(testing::bitwise_equal(xi, out));
      }
    }
  }
}

TEST(OpsRmsNorm, PerHeadViewInsideFusedQkv) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 5, hq = 3, hk = 1, hd = 17;
  Tensor qkv = random_normal(rng, {n, (hq + 2 * hk) * hd});
  const auto before = to_doubles(qkv);
  Tensor w = random_normal(rng, {hd});
  Tensor q3 = Tensor::empty({n, hq, hd}, DType::kF32);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hq * hd; ++j) q3.at<float>({i, j / hd, j % hd}) = qkv.at<float>({i, j});
  // The q heads as a strided [n, hq, hd] view of qkv (row stride (hq + 2*hk) * hd).
  Tensor qkv3 = qkv.view({n, hq + 2 * hk, hd});
  Tensor q_view = qkv3.slice(1, 0, hq);
  ASSERT_FALSE(q_view.is_contiguous());
  ops::rms_norm(q_view, w, 1e-5f, q_view);
  Tensor q_ref = q3.view({n * hq, hd});
  ops::rms_norm(q_ref, w, 1e-5f, q_ref);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < (hq + 2 * hk) * hd; ++j) {
      const float got = qkv.at<float>({i, j});
      if (j < hq * hd) {
        ASSERT_EQ(got, q3.at<float>({i, j / hd, j % hd})) << "q element " << i << "," << j;
      } else {
        ASSERT_EQ(got, static_cast<float>(before[i * (hq + 2 * hk) * hd + j])) << "k/v must be untouched";
      }
    }
  }
}

TEST(OpsRmsNorm, FusedAddMatchesReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t d : {1, 17, 129}) {
    const int64_t n = 7;
    Tensor x = random_normal(rng, {n, d});
    Tensor res = random_normal(rng, {n, d});
    Tensor w = random_normal(rng, {d});
    auto xs = to_doubles(x), rs = to_doubles(res);
    for (size_t i = 0; i < xs.size(); ++i) rs[i] += xs[i];
    const auto want = ref_rms_norm(rs, to_doubles(w), d, 1e-5);
    ops::fused_add_rms_norm(x, res, w, 1e-5f);
    EXPECT_LE(rel_l2(res, rs), 1e-7) << "residual sum, d " << d;
    EXPECT_LE(rel_l2(x, want), kF32Tol) << "d " << d;
  }
  Tensor a = Tensor::zeros({2, 4}, DType::kF32), b = Tensor::zeros({2, 5}, DType::kF32);
  const std::string msg = testing::error_of([&] { ops::fused_add_rms_norm(a, b, Tensor::zeros({4}, DType::kF32), 1e-5f); });
  EXPECT_NE(msg.find("residual f32[2, 5] cpu must have the shape of x f32[2, 4] cpu"), std::string::npos) << msg;
}

TEST(OpsActivation, SiluAndMul) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t inter : {1, 3, 17, 129}) {
    const int64_t n = 9;
    Tensor x = random_normal(rng, {n, 2 * inter}, 4.0f);
    Tensor out = Tensor::empty({n, inter}, DType::kF32);
    poison(out);
    ops::silu_and_mul(x, out);
    std::vector<double> want(n * inter);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < inter; ++j) {
        const double g = x.at<float>({i, j}), u = x.at<float>({i, inter + j});
        want[i * inter + j] = g / (1.0 + std::exp(-g)) * u;
      }
    }
    EXPECT_LE(rel_l2(out, want), kF32Tol) << "inter " << inter;
  }
  const std::string msg = testing::error_of(
      [&] { ops::silu_and_mul(Tensor::zeros({2, 6}, DType::kF32), Tensor::zeros({2, 6}, DType::kF32)); });
  EXPECT_NE(msg.find("ops::silu_and_mul: out f32[2, 6] cpu: dimension 1 must be inter"), std::string::npos) << msg;
}

TEST(OpsActivation, GeluTanhAndMul) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t inter : {1, 3, 17, 129}) {
    const int64_t n = 9;
    Tensor xb = random_normal(rng, {n, 2 * inter + 3}, 4.0f);  // row stride > 2 * inter
    Tensor x = xb.slice(1, 0, 2 * inter);
    Tensor out = Tensor::empty({n, inter}, DType::kF32);
    poison(out);
    ops::gelu_tanh_and_mul(x, out);
    std::vector<double> want(n * inter);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < inter; ++j) {
        const double g = x.at<float>({i, j}), u = x.at<float>({i, inter + j});
        const double gelu = 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
        want[i * inter + j] = gelu * u;
      }
    }
    EXPECT_LE(rel_l2(out, want), kF32Tol) << "inter " << inter;
  }
  const std::string msg = testing::error_of(
      [&] { ops::gelu_tanh_and_mul(Tensor::zeros({2, 5}, DType::kF32), Tensor::zeros({2, 2}, DType::kF32)); });
  EXPECT_NE(msg.find("ops::gelu_tanh_and_mul: x f32[2, 5] cpu: the last dimension must be even"), std::string::npos)
      << msg;
}

TEST(OpsActivation, ScaleAndSoftCapInPlaceOnStridedRows) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t d : {1, 3, 17, 129}) {
    const int64_t n = 7;
    Tensor base = random_normal(rng, {n, d + 2}, 40.0f);
    const std::vector<double> before = to_doubles(base);
    Tensor x = base.slice(1, 1, 1 + d);  // the columns around it must not change
    ops::scale(x, 11.3137085f);
    std::vector<double> want = before;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j) want[i * (d + 2) + 1 + j] *= static_cast<double>(11.3137085f);
    EXPECT_LE(rel_l2(base, want), 1e-7) << "scale, d " << d;
    ops::soft_cap(x, 30.0f);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j) {
        double& v = want[i * (d + 2) + 1 + j];
        v = 30.0 * std::tanh(v / 30.0);
      }
    EXPECT_LE(rel_l2(base, want), kF32Tol) << "soft_cap, d " << d;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(base.at<float>({i, 0}), static_cast<float>(before[i * (d + 2)]));
      EXPECT_EQ(base.at<float>({i, d + 1}), static_cast<float>(before[i * (d + 2) + d + 1]));
      for (int64_t j = 0; j < d; ++j) EXPECT_LE(std::fabs(base.at<float>({i, 1 + j})), 30.0f);
    }
  }
  const std::string msg = testing::error_of([&] { ops::soft_cap(Tensor::zeros({2, 2}, DType::kF32), 0.0f); });
  EXPECT_NE(msg.find("ops::soft_cap: cap must be positive and finite, got 0"), std::string::npos) << msg;
}

TEST(OpsKvStore, WritesSlotsAndLeavesOthers) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t slots = 40, heads = 3, hd = 17, n = 13;
  for (DType cache_dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType loc_dtype : {DType::kI32, DType::kI64}) {
      Tensor kc = Tensor::zeros({slots, heads, hd}, cache_dtype), vc = Tensor::zeros({slots, heads, hd}, cache_dtype);
      poison(kc);
      poison(vc);
      // k is a strided view (the middle part of a fused qkv buffer).
      Tensor qkv = random_normal(rng, {n, 3 * heads * hd});
      Tensor k = qkv.view({n, 3 * heads, hd}).slice(1, heads, 2 * heads);
      Tensor v = random_normal(rng, {n, heads, hd});
      std::vector<int64_t> perm(slots);
      for (int64_t i = 0; i < slots; ++i) perm[i] = i;
      std::shuffle(perm.begin(), perm.end(), rng.gen());
      perm.resize(n);
      std::vector<int32_t> perm32(perm.begin(), perm.end());
      Tensor loc = loc_dtype == DType::kI64 ? Tensor::from_vector(perm) : Tensor::from_vector(perm32);
      ops::store_kv_cache(k, v, kc, vc, loc);
      std::vector<bool> written(slots, false);
      for (int64_t t = 0; t < n; ++t) {
        written[perm[t]] = true;
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t c = 0; c < hd; ++c) {
            const int64_t ci = (perm[t] * heads + h) * hd + c;
            ASSERT_EQ(testing::element(kc, ci), testing::element(k.contiguous().to(cache_dtype), (t * heads + h) * hd + c));
            ASSERT_EQ(testing::element(vc, ci), testing::element(v.to(cache_dtype), (t * heads + h) * hd + c));
          }
        }
      }
      for (int64_t s = 0; s < slots; ++s) {
        if (!written[s]) {
          ASSERT_TRUE(std::isnan(testing::element(kc, s * heads * hd))) << "slot " << s << " written";
        }
      }
    }
  }
  Tensor kc = Tensor::zeros({4, 1, 2}, DType::kF32);
  Tensor k = Tensor::zeros({1, 1, 2}, DType::kF32);
  const std::string msg =
      testing::error_of([&] { ops::store_kv_cache(k, k, kc, kc, Tensor::from_vector<int32_t>({4})); });
  EXPECT_NE(msg.find("out_cache_loc[0] = 4 is outside the pool [0, 4)"), std::string::npos) << msg;
  // Keys and values are written by one launch on CUDA: they must share a dtype.
  const Tensor v16 = Tensor::zeros({1, 1, 2}, DType::kBF16);
  const std::string mixed =
      testing::error_of([&] { ops::store_kv_cache(k, v16, kc, kc, Tensor::from_vector<int32_t>({0})); });
  EXPECT_NE(mixed.find("must have the dtype of k"), std::string::npos) << mixed;
}

TEST(OpsSoftmax, SoftmaxLogSoftmaxArgmax) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t v : {1, 3, 17, 129, 4099}) {
    const int64_t n = 5;
    Tensor x = random_normal(rng, {n, v}, 5.0f);
    if (v > 3) x.at<float>({1, 2}) = x.at<float>({1, v - 1}) = 100.0f;  // tie: the first index wins
    const auto xs = to_doubles(x);
    std::vector<double> sm(xs.size()), lsm(xs.size());
    std::vector<int32_t> am(n);
    for (int64_t i = 0; i < n; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < v; ++j) {
        if (xs[i * v + j] > m) am[i] = static_cast<int32_t>(j);
        m = std::max(m, xs[i * v + j]);
      }
      for (int64_t j = 0; j < v; ++j) s += std::exp(xs[i * v + j] - m);
      for (int64_t j = 0; j < v; ++j) {
        sm[i * v + j] = std::exp(xs[i * v + j] - m) / s;
        lsm[i * v + j] = xs[i * v + j] - m - std::log(s);
      }
    }
    Tensor am_out = Tensor::empty({n}, DType::kI32);
    am_out.fill_(-7);
    ops::argmax(x, am_out);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(am_out.at<int32_t>({i}), am[i]) << "row " << i << " v " << v;
    if (v > 3) {
      EXPECT_EQ(am_out.at<int32_t>({1}), 2);
    }
    Tensor a = x.clone(), b = x.clone();
    ops::softmax(a);
    ops::log_softmax(b);
    EXPECT_LE(rel_l2(a, sm), kF32Tol) << "softmax v " << v;
    EXPECT_LE(rel_l2(b, lsm), kF32Tol) << "log_softmax v " << v;
  }
  // Strided rows (a column slice) work in place and leave the rest alone.
  Tensor big = random_normal(rng, {3, 10});
  Tensor left = big.slice(1, 0, 4);
  const float untouched = big.at<float>({2, 7});
  ops::softmax(left);
  double s = 0;
  for (int64_t j = 0; j < 4; ++j) s += left.at<float>({2, j});
  EXPECT_NEAR(s, 1.0, 1e-6);
  EXPECT_EQ(big.at<float>({2, 7}), untouched);
}

#ifndef RADIXLM_WITH_CUDA
TEST(OpsDispatch, NonCpuTensorsFailClearly) {
  static float storage[8];
  Tensor x = Tensor::from_blob(storage, {2, 4}, DType::kF32, Device::cuda(0), nullptr);
  Tensor w = Tensor::from_blob(storage, {4}, DType::kF32, Device::cuda(0), nullptr);
  const std::string msg = testing::error_of([&] { ops::rms_norm(x, w, 1e-5f, x); });
  EXPECT_NE(msg.find("ops::rms_norm: not built for cuda:0"), std::string::npos) << msg;
  Tensor wc = Tensor::zeros({4}, DType::kF32);
  const std::string msg2 = testing::error_of([&] { ops::rms_norm(x, wc, 1e-5f, x); });
  EXPECT_NE(msg2.find("weight f32[4] cpu is not on the same device"), std::string::npos) << msg2;
}
#endif

}  // namespace
}  // namespace rlm
