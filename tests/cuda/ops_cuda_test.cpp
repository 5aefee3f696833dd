// CUDA twins of the element-wise, norm, rotary, embedding, KV-store and softmax ops, each against
// its CPU twin on fresh random inputs (seed in every failure message), odd sizes, strided views and
// poisoned outputs: the CPU and GPU runs start from identical buffers (the whole base tensor behind
// every view), and the whole base is compared afterwards, so an unwritten or stray element shows.
// Tolerances: f32 results rel. L2 <= 1e-5; dtype conversions and copies bit-exact (tolerance 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "ops/ops.h"
#include "cuda/cuda_test_util.h"

namespace rlm {
namespace {

using testing::compare_poisoned;
using testing::gpu;
using testing::poisoned;
using testing::random_dtype;
using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

constexpr double kF32Tol = 1e-5;
const int64_t kOddSizes[] = {1, 3, 17, 129, 4097};

TEST(OpsCuda, EmbeddingMatchesCpuForEveryDtypePair) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t vocab = 1000;
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType od : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t hidden : {1, 17, 4097}) {
        const Tensor w = random_dtype(rng, {vocab, hidden}, wd);
        const Tensor gw = to_gpu(w);
        for (int64_t n : {1, 3, 129}) {
          SCOPED_TRACE(str(dtype_name(wd), "->", dtype_name(od), " hidden ", hidden, " n ", n));
          std::vector<int32_t> id_values(static_cast<size_t>(n));
          for (auto& id : id_values) id = static_cast<int32_t>(rng.randint(0, vocab - 1));
          id_values[0] = static_cast<int32_t>(vocab - 1);
          const Tensor ids = Tensor::from_vector(id_values);
          // out is a strided view (row stride hidden + 3) of a poisoned base.
          const Tensor base = poisoned({n, hidden + 3}, od);
          const Tensor gbase = to_gpu(base);
          ops::embedding(ids, w, base.slice(1, 1, 1 + hidden));
          ops::embedding(to_gpu(ids), gw, gbase.slice(1, 1, 1 + hidden));
          EXPECT_EQ(compare_poisoned(to_cpu(gbase), base, 0.0), "");
        }
      }
    }
  }
}

TEST(OpsCuda, EmbeddingRejectsOutOfRangeIdsAndWritesNothing) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  const int64_t vocab = 50, hidden = 8;
  const Tensor w = to_gpu(random_normal(rng, {vocab, hidden}));
  for (int32_t bad : {-1, 50, 1 << 30}) {
    const Tensor ids = to_gpu(Tensor::from_vector(std::vector<int32_t>{3, 4, bad, 7}));
    const Tensor out = to_gpu(poisoned({4, hidden}, DType::kF32));
    const std::string err = testing::error_of([&] { ops::embedding(ids, w, out); });
    EXPECT_NE(err.find(str("token id ", bad, " at position 2")), std::string::npos) << err;
    EXPECT_EQ(compare_poisoned(to_cpu(out), poisoned({4, hidden}, DType::kF32), 0.0), "");
  }
}

// Runs rms_norm (or fused_add_rms_norm) on CPU and GPU over views into identical bases.
// `aligned`: 2-D views whose rows start on 16 bytes (the kernels' float4 path when d % 4 == 0).
void check_norm(TestRng& rng, bool fused, bool three_d, bool in_place, int64_t n, int64_t d, DType wd,
                bool aligned = false) {
  SCOPED_TRACE(str(fused ? "fused" : "rms_norm", three_d ? " 3-D" : " 2-D", in_place ? " in place" : "", " n ", n,
                   " d ", d, " weight ", dtype_name(wd), aligned ? " aligned" : ""));
  const float eps = 1e-6f;
  const Tensor w = random_dtype(rng, {d}, wd);
  // Bases: 3-D [n, 5, d] with the view on heads [1, 4) (a per-head slice of a fused QKV buffer);
  // 2-D [n, d + 3] with the view on columns [2, 2 + d) ([n, d + 8] and [4, 4 + d) when aligned).
  const int64_t pad = aligned ? 8 : 3, off = aligned ? 4 : 2;
  auto make = [&](bool poison) {
    Shape s = three_d ? Shape{n, 5, d} : Shape{n, d + pad};
    return poison ? poisoned(s, DType::kF32) : random_normal(rng, s, 2.0f);
  };
  auto view = [&](const Tensor& b) { return three_d ? b.slice(1, 1, 4) : b.slice(1, off, off + d); };
  const Tensor xb = make(false), ob = make(!fused && !in_place);
  const Tensor gxb = to_gpu(xb), gob = to_gpu(ob);
  if (fused) {
    ops::fused_add_rms_norm(view(xb), view(ob), w, eps);
    ops::fused_add_rms_norm(view(gxb), view(gob), to_gpu(w), eps);
  } else if (in_place) {
    ops::rms_norm(view(xb), w, eps, view(xb));
    ops::rms_norm(view(gxb), to_gpu(w), eps, view(gxb));
  } else {
    ops::rms_norm(view(xb), w, eps, view(ob));
    ops::rms_norm(view(gxb), to_gpu(w), eps, view(gob));
  }
  EXPECT_EQ(compare_poisoned(to_cpu(gxb), xb, kF32Tol), "") << "x base";
  EXPECT_EQ(compare_poisoned(to_cpu(gob), ob, kF32Tol), "") << "out/residual base";
}

TEST(OpsCuda, RmsNormMatchesCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {1, 3, 17, 129}) {
    for (int64_t d : kOddSizes) {
      for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (bool three_d : {false, true}) {
          if (three_d && d > 129) continue;
          check_norm(rng, false, three_d, false, n, d, wd);
          check_norm(rng, false, three_d, true, n, d, wd);
          check_norm(rng, true, three_d, false, n, d, wd);
        }
      }
    }
  }
}

// Rows of float4s (d % 4 == 0, aligned): the register path for d up to 8 * 4 * 256 floats per row,
// the scalar loop beyond (8196) and for the unaligned 2-D views of the test above.
TEST(OpsCuda, RmsNormFloat4RowsMatchCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {1, 5, 33}) {
    for (int64_t d : {4, 12, 64, 128, 1028, 2048, 4096, 8192, 8196}) {
      for (DType wd : {DType::kF32, DType::kBF16}) {
        for (bool three_d : {false, true}) {
          if (three_d && d > 1028) continue;
          check_norm(rng, false, three_d, false, n, d, wd, true);
          check_norm(rng, false, three_d, true, n, d, wd, true);
          check_norm(rng, true, three_d, false, n, d, wd, true);
        }
      }
    }
  }
}

TEST(OpsCuda, RotaryMatchesCpuNeoxAndGptjPartialAndBothIndexTypes) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t max_pos = 300;
  for (bool neox : {true, false}) {
    for (auto [head_dim, rotary_dim] : {std::pair<int64_t, int64_t>{64, 64}, {64, 32}, {34, 16}, {2, 2}}) {
      ops::RopeConfig cfg;
      cfg.rotary_dim = rotary_dim;
      cfg.theta = 10000.0;
      cfg.is_neox = neox;
      const Tensor cache = ops::make_rope_cos_sin_cache(cfg, max_pos);
      const Tensor gcache = to_gpu(cache);
      for (int64_t n : {1, 3, 17, 129}) {
        for (DType pd : {DType::kI32, DType::kI64}) {
          SCOPED_TRACE(str(neox ? "neox" : "gptj", " head_dim ", head_dim, " rotary_dim ", rotary_dim, " n ", n, " ",
                           dtype_name(pd)));
          const int64_t hq = 4, hk = 2;
          // q and k are views into a fused [n, hq + 2*hk, head_dim] QKV buffer.
          const Tensor qkv = random_normal(rng, {n, hq + 2 * hk, head_dim});
          const Tensor gqkv = to_gpu(qkv);
          Tensor pos = Tensor::empty({n}, pd);
          for (int64_t t = 0; t < n; ++t) {
            const int64_t p = t == 0 ? max_pos - 1 : rng.randint(0, max_pos - 1);
            if (pd == DType::kI32) pos.at<int32_t>({t}) = static_cast<int32_t>(p);
            else pos.at<int64_t>({t}) = p;
          }
          ops::rotary_embedding(qkv.slice(1, 0, hq), qkv.slice(1, hq, hq + hk), pos, cache, neox);
          ops::rotary_embedding(gqkv.slice(1, 0, hq), gqkv.slice(1, hq, hq + hk), to_gpu(pos), gcache, neox);
          EXPECT_EQ(compare_poisoned(to_cpu(gqkv), qkv, kF32Tol), "");
        }
      }
    }
  }
}

TEST(OpsCuda, RotaryRejectsOutOfRangePositionsAndModifiesNothing) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  ops::RopeConfig cfg;
  cfg.rotary_dim = 8;
  const Tensor cache = to_gpu(ops::make_rope_cos_sin_cache(cfg, 16));
  const Tensor q = random_normal(rng, {3, 2, 8}), k = random_normal(rng, {3, 1, 8});
  const Tensor gq = to_gpu(q), gk = to_gpu(k);
  const Tensor pos = to_gpu(Tensor::from_vector(std::vector<int64_t>{0, 16, 2}));
  const std::string err = testing::error_of([&] { ops::rotary_embedding(gq, gk, pos, cache, true); });
  EXPECT_NE(err.find("position 16 of token 1"), std::string::npos) << err;
  EXPECT_EQ(compare_poisoned(to_cpu(gq), q, 0.0), "");
  EXPECT_EQ(compare_poisoned(to_cpu(gk), k, 0.0), "");
}

// A gated activation (x: [n, 2 * inter] -> out: [n, inter]) on both devices, on strided views.
void expect_gated_activation_matches_cpu(void (*op)(const Tensor&, const Tensor&)) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {1, 3, 17, 129}) {
    for (int64_t inter : kOddSizes) {
      SCOPED_TRACE(str("n ", n, " inter ", inter));
      const Tensor xb = random_normal(rng, {n, 2 * inter + 5}, 3.0f);  // row stride > 2 * inter
      const Tensor ob = poisoned({n, inter + 2}, DType::kF32);
      const Tensor gxb = to_gpu(xb), gob = to_gpu(ob);
      op(xb.slice(1, 0, 2 * inter), ob.slice(1, 1, 1 + inter));
      op(gxb.slice(1, 0, 2 * inter), gob.slice(1, 1, 1 + inter));
      EXPECT_EQ(compare_poisoned(to_cpu(gob), ob, kF32Tol), "");
      EXPECT_EQ(compare_poisoned(to_cpu(gxb), xb, 0.0), "") << "x must not change";
    }
  }
  // Rows of float4s (inter and both row strides multiples of 4, aligned views): the vector kernel.
  for (int64_t n : {1, 7, 64}) {
    for (int64_t inter : {4, 12, 256, 1024, 14336}) {
      SCOPED_TRACE(str("aligned n ", n, " inter ", inter));
      const Tensor xb = random_normal(rng, {n, 2 * inter + 8}, 3.0f);
      const Tensor ob = poisoned({n, inter + 8}, DType::kF32);
      const Tensor gxb = to_gpu(xb), gob = to_gpu(ob);
      op(xb.slice(1, 0, 2 * inter), ob.slice(1, 4, 4 + inter));
      op(gxb.slice(1, 0, 2 * inter), gob.slice(1, 4, 4 + inter));
      EXPECT_EQ(compare_poisoned(to_cpu(gob), ob, kF32Tol), "");
      EXPECT_EQ(compare_poisoned(to_cpu(gxb), xb, 0.0), "") << "x must not change";
    }
  }
}

TEST(OpsCuda, SiluAndMulMatchesCpu) {
  RLM_REQUIRE_CUDA();
  expect_gated_activation_matches_cpu(ops::silu_and_mul);
}

TEST(OpsCuda, GeluTanhAndMulMatchesCpu) {
  RLM_REQUIRE_CUDA();
  expect_gated_activation_matches_cpu(ops::gelu_tanh_and_mul);
}

TEST(OpsCuda, ScaleAndSoftCapMatchCpuOnStridedRows) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {1, 3, 129}) {
    for (int64_t d : kOddSizes) {
      SCOPED_TRACE(str("n ", n, " d ", d));
      const Tensor xb = random_normal(rng, {n, d + 3}, 40.0f);
      const Tensor gxb = to_gpu(xb);
      ops::scale(xb.slice(1, 1, 1 + d), 45.254834f);
      ops::scale(gxb.slice(1, 1, 1 + d), 45.254834f);
      EXPECT_EQ(compare_poisoned(to_cpu(gxb), xb, kF32Tol), "") << "scale";
      ops::soft_cap(xb.slice(1, 1, 1 + d), 30.0f);
      ops::soft_cap(gxb.slice(1, 1, 1 + d), 30.0f);
      EXPECT_EQ(compare_poisoned(to_cpu(gxb), xb, kF32Tol), "") << "soft_cap";
    }
  }
}

TEST(OpsCuda, StoreKvCacheMatchesCpuAcrossPageBoundaries) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t page_size = 16, num_pages = 9, slots = page_size * num_pages, heads = 3;
  // head_dim 17: the scalar kernel; 32: the 4-element one (aligned views).
  for (int64_t head_dim : {17, 32}) {
    for (DType src_dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (DType cache_dt : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (DType loc_dt : {DType::kI32, DType::kI64}) {
          for (int64_t n : {1, 3, 17, 129}) {
            SCOPED_TRACE(str(dtype_name(src_dt), "->", dtype_name(cache_dt), " loc ", dtype_name(loc_dt),
                             " n ", n, " head_dim ", head_dim));
            // Distinct slots, always including both sides of page boundaries and the last slot.
            std::vector<int64_t> all(static_cast<size_t>(slots));
            std::iota(all.begin(), all.end(), 0);
            std::shuffle(all.begin(), all.end(), rng.gen());
            std::vector<int64_t> must = {15, 16, 31, 32, slots - 1, 0};
            for (size_t i = 0; i < must.size() && i < static_cast<size_t>(n); ++i) {
              std::iter_swap(all.begin() + static_cast<int64_t>(i),
                             std::find(all.begin(), all.end(), must[i]));
            }
            Tensor loc = Tensor::empty({n}, loc_dt);
            for (int64_t t = 0; t < n; ++t) {
              if (loc_dt == DType::kI32)
                loc.at<int32_t>({t}) = static_cast<int32_t>(all[t]);
              else
                loc.at<int64_t>({t}) = all[t];
            }
            // k, v: views into a fused [n, 3*heads, head_dim] buffer; caches poisoned.
            const Tensor kv = random_dtype(rng, {n, 3 * heads, head_dim}, src_dt);
            const Tensor kc = poisoned({slots, heads, head_dim}, cache_dt);
            const Tensor vc = poisoned({slots, heads, head_dim}, cache_dt);
            const Tensor gkv = to_gpu(kv), gkc = to_gpu(kc), gvc = to_gpu(vc);
            ops::store_kv_cache(kv.slice(1, heads, 2 * heads), kv.slice(1, 2 * heads, 3 * heads), kc, vc,
                                loc);
            ops::store_kv_cache(gkv.slice(1, heads, 2 * heads), gkv.slice(1, 2 * heads, 3 * heads), gkc, gvc,
                                to_gpu(loc));
            EXPECT_EQ(compare_poisoned(to_cpu(gkc), kc, 0.0), "") << "k_cache";
            EXPECT_EQ(compare_poisoned(to_cpu(gvc), vc, 0.0), "") << "v_cache";
          }
        }
      }
    }
  }
}

TEST(OpsCuda, StoreKvCacheRejectsBadSlotsAndWritesNothing) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  const Tensor k = to_gpu(random_normal(rng, {3, 2, 4})), v = to_gpu(random_normal(rng, {3, 2, 4}));
  const Tensor kc = to_gpu(poisoned({8, 2, 4}, DType::kBF16)), vc = to_gpu(poisoned({8, 2, 4}, DType::kBF16));
  const Tensor loc = to_gpu(Tensor::from_vector(std::vector<int32_t>{1, 2, 8}));
  const std::string err = testing::error_of([&] { ops::store_kv_cache(k, v, kc, vc, loc); });
  EXPECT_NE(err.find("out_cache_loc[2] = 8"), std::string::npos) << err;
  EXPECT_EQ(compare_poisoned(to_cpu(kc), poisoned({8, 2, 4}, DType::kBF16), 0.0), "");
  EXPECT_EQ(compare_poisoned(to_cpu(vc), poisoned({8, 2, 4}, DType::kBF16), 0.0), "");
}

TEST(OpsCuda, SoftmaxAndLogSoftmaxMatchCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (bool log : {false, true}) {
    for (int64_t n : {1, 3, 17}) {
      for (int64_t v : {1, 3, 17, 129, 4097, 50001}) {
        SCOPED_TRACE(str(log ? "log_softmax" : "softmax", " n ", n, " v ", v));
        Tensor xb = random_normal(rng, {n, v + 4}, 5.0f);
        for (int64_t i = 0; i < n; ++i) {  // poison the columns outside the view: they must stay
          xb.at<float>({i, 0}) = std::numeric_limits<float>::quiet_NaN();
          for (int64_t j = v + 1; j < v + 4; ++j) xb.at<float>({i, j}) = std::numeric_limits<float>::quiet_NaN();
        }
        const Tensor gxb = to_gpu(xb);
        if (log) {
          ops::log_softmax(xb.slice(1, 1, 1 + v));
          ops::log_softmax(gxb.slice(1, 1, 1 + v));
        } else {
          ops::softmax(xb.slice(1, 1, 1 + v));
          ops::softmax(gxb.slice(1, 1, 1 + v));
        }
        EXPECT_EQ(compare_poisoned(to_cpu(gxb), xb, kF32Tol), "");
      }
    }
  }
}

TEST(OpsCuda, ArgmaxMatchesCpuIncludingTiesAndNaNs) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t v : {1, 3, 17, 129, 4097, 256000}) {
    const int64_t n = 7;
    SCOPED_TRACE(str("v ", v));
    Tensor x = random_normal(rng, {n, v + 2});
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // row 1: the maximum repeated (first index wins); row 2: NaNs sprinkled; row 3: all NaN;
    // row 4: all equal; row 5: -inf everywhere.
    for (int64_t j = 0; j < v; ++j) {
      if (j % 5 == 2) x.at<float>({1, j}) = 100.0f;
      if (j % 3 == 0) x.at<float>({2, j}) = nan;
      x.at<float>({3, j}) = nan;
      x.at<float>({4, j}) = 0.5f;
      x.at<float>({5, j}) = -std::numeric_limits<float>::infinity();
    }
    const Tensor view = x.slice(1, 0, v);
    Tensor want = Tensor::empty({n}, DType::kI32);
    ops::argmax(view, want);
    const Tensor got = to_gpu(poisoned({n}, DType::kI32));
    ops::argmax(to_gpu(x).slice(1, 0, v), got);
    EXPECT_EQ(testing::int_values(got), testing::int_values(want));
  }
}

TEST(OpsCuda, MixedDevicesAreRejected) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  const Tensor x = random_normal(rng, {2, 4});
  const Tensor out = to_gpu(poisoned({2, 4}, DType::kF32));
  const std::string err = testing::error_of([&] { ops::rms_norm(x, Tensor::zeros({4}, DType::kF32), 1e-6f, out); });
  EXPECT_NE(err.find("not on the same device"), std::string::npos) << err;
}

}  // namespace
}  // namespace rlm
