// CUDA twins of the element-wise, norm, rotary, embedding, KV-store and softmax ops, each against
// its CPU twin on fresh random inputs (seed in every failure message), odd sizes, strided views and
// poisoned outputs: the CPU and GPU runs start from identical buffers (the whole base tensor behind
// every view), and the whole base is compared afterwards, so an unwritten or stray element shows.
// Tolerances: f32 results rel. L2 <= 1e-5; dtype conversions and copies bit-exact (tolerance 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "ops/ops.h"

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

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = to_cpu(a).contiguous(), y = to_cpu(b).contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.nbytes())) == 0;
}

// The fused attention prologue (ops::rotary_store_kv_cache): without q/k norms bit for bit the two
// GPU ops in turn (q, k and every byte of both pools); with norms (f32 or bf16 weights) within
// kF32Tol of the three GPU ops; in both within kF32Tol of the CPU twin (the CPU ops) for q, k and
// f32 pools. neox and GPT-J, partial rotation, a value size of its own, FP8 pools with scales.
TEST(OpsCuda, RotaryStoreKvMatchesTheTwoOpsAndTheCpuTwin) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t max_pos = 300, slots = 160, hq = 4, hk = 2;
  struct Dims {
    int64_t head_dim, rotary_dim, v_head_dim;
  };
  for (bool neox : {true, false}) {
    // The kernel's three instantiations: heads of up to 128 fully rotated, wider ones, partial rotation.
    for (Dims dims : {Dims{64, 64, 64}, Dims{32, 32, 48}, Dims{256, 256, 256}, Dims{128, 128, 192},
                      Dims{64, 32, 64}, Dims{34, 16, 34}}) {
      ops::RopeConfig cfg;
      cfg.rotary_dim = dims.rotary_dim;
      cfg.theta = 10000.0;
      cfg.is_neox = neox;
      const Tensor cache = ops::make_rope_cos_sin_cache(cfg, max_pos);
      const Tensor gcache = to_gpu(cache);
      for (DType cache_dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
        const bool fp8 = cache_dt == DType::kF8E4M3;
        const float ks = fp8 ? 0.5f : 1.0f, vs = fp8 ? 2.0f : 1.0f;
        for (int64_t n : {1, 3, 17, 129}) {
          const DType idx_dt = n == 3 || n == 129 ? DType::kI64 : DType::kI32;
          // Norms on every other case, their weights in f32 or bf16.
          const bool norm = (n + (neox ? 1 : 0)) % 2 == 0;
          const DType w_dt = n == 17 ? DType::kF32 : DType::kBF16;
          SCOPED_TRACE(str(neox ? "neox" : "gptj", " head_dim ", dims.head_dim, " rotary_dim ",
                           dims.rotary_dim, " v_head_dim ", dims.v_head_dim, " pool ", dtype_name(cache_dt),
                           " n ", n, " index ", dtype_name(idx_dt),
                           norm ? str(" norms ", dtype_name(w_dt)) : std::string()));
          const Tensor qn = random_dtype(rng, {dims.head_dim}, w_dt),
                       kn = random_dtype(rng, {dims.head_dim}, w_dt);
          const Tensor gqn = to_gpu(qn), gkn = to_gpu(kn);
          const float eps = 1e-6f;
          // q, k: views into a fused [n, hq + hk, head_dim] buffer; v: a view of wider rows.
          const Tensor qk = random_normal(rng, {n, hq + hk, dims.head_dim});
          const Tensor vb = random_normal(rng, {n, hk, dims.v_head_dim + 4});
          std::vector<int64_t> all(static_cast<size_t>(slots));
          std::iota(all.begin(), all.end(), 0);
          std::shuffle(all.begin(), all.end(), rng.gen());
          Tensor pos = Tensor::empty({n}, idx_dt), loc = Tensor::empty({n}, idx_dt);
          for (int64_t t = 0; t < n; ++t) {
            const int64_t p = t == 0 ? max_pos - 1 : rng.randint(0, max_pos - 1);
            if (idx_dt == DType::kI32) {
              pos.at<int32_t>({t}) = static_cast<int32_t>(p);
              loc.at<int32_t>({t}) = static_cast<int32_t>(all[t]);
            } else {
              pos.at<int64_t>({t}) = p;
              loc.at<int64_t>({t}) = all[t];
            }
          }
          auto pool = [&](int64_t width) {
            return fp8 ? Tensor::zeros({slots, hk, width}, cache_dt) : poisoned({slots, hk, width}, cache_dt);
          };
          const Tensor kc = pool(dims.head_dim), vc = pool(dims.v_head_dim);
          auto q_of = [&](const Tensor& t) { return t.slice(1, 0, hq); };
          auto k_of = [&](const Tensor& t) { return t.slice(1, hq, hq + hk); };
          auto v_of = [&](const Tensor& t) { return t.slice(2, 0, dims.v_head_dim); };
          // The CPU twin.
          const Tensor cqk = qk.clone(), ckc = kc.clone(), cvc = vc.clone();
          ops::rotary_store_kv_cache(q_of(cqk), k_of(cqk), v_of(vb), pos, cache, neox, ckc, cvc, loc, ks, vs,
                                     norm ? &qn : nullptr, norm ? &kn : nullptr, eps);
          // The fused kernel and the ops in turn, from the same buffers.
          const Tensor gpos = to_gpu(pos), gloc = to_gpu(loc), gv = to_gpu(vb);
          const Tensor fqk = to_gpu(qk), fkc = to_gpu(kc), fvc = to_gpu(vc);
          ops::rotary_store_kv_cache(q_of(fqk), k_of(fqk), v_of(gv), gpos, gcache, neox, fkc, fvc, gloc, ks,
                                     vs, norm ? &gqn : nullptr, norm ? &gkn : nullptr, eps);
          const Tensor tqk = to_gpu(qk), tkc = to_gpu(kc), tvc = to_gpu(vc);
          if (norm) {
            ops::rms_norm(q_of(tqk), gqn, eps, q_of(tqk));
            ops::rms_norm(k_of(tqk), gkn, eps, k_of(tqk));
          }
          ops::rotary_embedding(q_of(tqk), k_of(tqk), gpos, gcache, neox);
          ops::store_kv_cache(k_of(tqk), v_of(gv), tkc, tvc, gloc, ks, vs);
          if (norm) {
            EXPECT_EQ(compare_poisoned(to_cpu(fqk), to_cpu(tqk), kF32Tol), "") << "q, k";
            if (cache_dt == DType::kF32) {
              EXPECT_EQ(compare_poisoned(to_cpu(fkc), to_cpu(tkc), kF32Tol), "") << "k pool";
            }
          } else {
            EXPECT_TRUE(same_bytes(fqk, tqk)) << "q, k";
            EXPECT_TRUE(same_bytes(fkc, tkc)) << "k pool";
          }
          EXPECT_TRUE(same_bytes(fvc, tvc)) << "v pool";
          EXPECT_TRUE(same_bytes(gv, vb)) << "v must not change";
          EXPECT_EQ(compare_poisoned(to_cpu(fqk), cqk, kF32Tol), "");
          if (cache_dt == DType::kF32) {
            EXPECT_EQ(compare_poisoned(to_cpu(fkc), ckc, kF32Tol), "") << "k pool";
            EXPECT_EQ(compare_poisoned(to_cpu(fvc), cvc, kF32Tol), "") << "v pool";
          }
        }
      }
    }
  }
}

// Bad positions and bad slots: the errors of the two ops, and nothing is modified.
TEST(OpsCuda, RotaryStoreKvRejectsBadPositionsAndSlotsAndModifiesNothing) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  ops::RopeConfig cfg;
  cfg.rotary_dim = 8;
  const Tensor cache = to_gpu(ops::make_rope_cos_sin_cache(cfg, 16));
  const Tensor q = random_normal(rng, {3, 2, 8}), k = random_normal(rng, {3, 1, 8}),
               v = random_normal(rng, {3, 1, 8});
  const Tensor kc = poisoned({8, 1, 8}, DType::kBF16), vc = poisoned({8, 1, 8}, DType::kBF16);
  struct Case {
    std::vector<int64_t> pos, loc;
    const char* error;
  };
  for (const Case& c : {Case{{0, 16, 2}, {1, 2, 3}, "position 16 of token 1"},
                        Case{{0, 1, 2}, {1, 2, 8}, "out_cache_loc[2] = 8"}}) {
    const Tensor gq = to_gpu(q), gk = to_gpu(k), gv = to_gpu(v), gkc = to_gpu(kc), gvc = to_gpu(vc);
    const std::string err = testing::error_of([&] {
      ops::rotary_store_kv_cache(gq, gk, gv, to_gpu(Tensor::from_vector(c.pos)), cache, true, gkc, gvc,
                                 to_gpu(Tensor::from_vector(c.loc)));
    });
    EXPECT_NE(err.find(c.error), std::string::npos) << err;
    EXPECT_TRUE(same_bytes(gq, q) && same_bytes(gk, k) && same_bytes(gkc, kc) && same_bytes(gvc, vc))
        << c.error;
  }
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
