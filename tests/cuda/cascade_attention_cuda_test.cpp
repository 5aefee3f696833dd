// Cascade attention on the GPU against its CPU twins, on fresh random inputs: the partial prefill
// kernels (key ranges + log-sum-exp; the tensor-core kernel for bf16/f16 caches and FP8 caches
// widened to f16 (per-layer k/v scales not 1), the FMA kernel for f32) through ops::paged_attention_partial,
// with and without a host plan; the merge kernel; and level 1 + level 2 + merge against the single pass. Odd
// page sizes, GQA ratios 1/4/8, head dims 64/128/256 (the tuned kernels) and every other tested size (16 ...
// 192, and q/k 192 with v 128: the padded kernels), sliding window and soft-cap, empty key ranges; outputs
// poisoned with NaN first.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::TestRng;

// rel. L2 of the GPU result vs the CPU twin: the tensor-core kernel rounds q and P to 16 bits (f16
// for f16 and FP8 caches).
bool f16_products(DType cache) { return cache == DType::kF16 || cache == DType::kF8E4M3; }
double out_tol(DType cache) { return cache == DType::kBF16 ? 2e-2 : f16_products(cache) ? 5e-3 : 1e-4; }
// abs tolerance of lse (times max(1, |lse|)).
double lse_tol(DType cache) { return cache == DType::kBF16 ? 3e-2 : f16_products(cache) ? 5e-3 : 1e-5; }

struct Case {
  int64_t page_size, hk, group, d;
  DType cache;
  int64_t window;
  float cap;
  int64_t dv = 0;  // v head size; 0: d

  int64_t v_dim() const { return dv > 0 ? dv : d; }
};

std::string describe(const Case& c) {
  return str("page ", c.page_size, " hk ", c.hk, " group ", c.group, " d ", c.d, " dv ", c.v_dim(), " ",
             dtype_name(c.cache), " window ", c.window, " cap ", c.cap);
}

struct Problem {
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0}, kv_indices, seq_lens, kv_begin, kv_end;
  Tensor q, k, v;  // CPU
  ops::AttentionParams p;
  int64_t page_size = 1, hq = 0;
};

// reqs: (seq_len, qo_len, kv_begin, kv_end).
Problem make_problem(TestRng& rng, const Case& c, const std::vector<std::array<int32_t, 4>>& reqs) {
  Problem pr;
  pr.page_size = c.page_size;
  pr.hq = c.hk * c.group;
  int64_t num_pages = 2;
  for (const auto& r : reqs) num_pages += (r[0] + c.page_size - 1) / c.page_size;
  std::vector<int32_t> pool(num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  size_t next = 0;
  for (const auto& r : reqs) {
    for (int64_t i = 0; i < (r[0] + c.page_size - 1) / c.page_size; ++i) pr.kv_indices.push_back(pool.at(next++));
    pr.kv_indptr.push_back(static_cast<int32_t>(pr.kv_indices.size()));
    pr.qo_indptr.push_back(pr.qo_indptr.back() + r[1]);
    pr.seq_lens.push_back(r[0]);
    pr.kv_begin.push_back(r[2]);
    pr.kv_end.push_back(r[3]);
  }
  const int64_t slots = num_pages * c.page_size;
  pr.k = testing::random_dtype(rng, {slots, c.hk, c.d}, c.cache);
  pr.v = testing::random_dtype(rng, {slots, c.hk, c.v_dim()}, c.cache);
  pr.q = testing::random_normal(rng, {pr.qo_indptr.back(), pr.hq, c.d});
  pr.p.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  pr.p.sliding_window = c.window;
  pr.p.logit_soft_cap = c.cap;
  if (c.cache == DType::kF8E4M3) {  // per-layer scales that are not powers of two
    pr.p.k_scale = 0.37f;
    pr.p.v_scale = 1.9f;
  }
  return pr;
}

struct Result {
  Tensor out, lse;  // CPU copies
};

Result run(const Problem& pr, Device dev, bool with_plan) {
  auto on = [&](const Tensor& t) { return t.to(dev); };
  auto iv = [&](const std::vector<int32_t>& v) { return on(Tensor::from_vector(v)); };
  const int64_t n = pr.q.size(0);
  Tensor out = on(testing::poisoned({n, pr.hq, pr.v.size(2)}, DType::kF32));
  Tensor lse = on(testing::poisoned({n, pr.hq}, DType::kF32));
  ops::PagedAttentionPlan plan;
  for (size_t r = 0; r < pr.seq_lens.size(); ++r) {
    plan.max_qo_len = std::max<int64_t>(plan.max_qo_len, pr.qo_indptr[r + 1] - pr.qo_indptr[r]);
    plan.max_seq_len = std::max<int64_t>(plan.max_seq_len, pr.seq_lens[r]);
  }
  ops::paged_attention_partial(on(pr.q), on(pr.k), on(pr.v), iv(pr.qo_indptr), iv(pr.kv_indptr), iv(pr.kv_indices),
                               iv(pr.seq_lens), iv(pr.kv_begin), iv(pr.kv_end), pr.page_size, pr.p, out, lse,
                               with_plan ? &plan : nullptr);
  return {out.to(Device::cpu()), lse.to(Device::cpu())};
}

void expect_lse(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    const bool ok = std::isinf(w) ? (std::isinf(g) && g < 0) : std::abs(g - w) <= tol * std::max(1.0f, std::abs(w));
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << ": lse[" << i << "] = " << g << ", CPU " << w;
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3}) {
    out.push_back({1, 2, 4, 128, dt, -1, 0.0f});
    out.push_back({16, 1, 8, 64, dt, -1, 0.0f});
    out.push_back({5, 4, 1, 256, dt, -1, 0.0f});
    out.push_back({16, 2, 4, 128, dt, 37, 0.0f});
    out.push_back({64, 2, 2, 64, dt, 80, 25.0f});
    // The padded kernels: every other tested head size, variants and page sizes rotating.
    const int64_t sizes[] = {16, 32, 48, 80, 96, 112, 160, 192};
    for (int i = 0; i < 8; ++i) {
      out.push_back({i % 2 ? 16 : 3, 2, int64_t{1} << (i % 3), sizes[i], dt, i % 4 == 1 ? 37 : -1,
                     i % 4 == 2 ? 25.0f : 0.0f});
    }
    out.push_back({16, 2, 4, 192, dt, -1, 0.0f, 128});  // split q/k 192, v 128
  }
  return out;
}

TEST(CascadeAttentionCuda, PartialMatchesCpuTwin) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (const Case& c : cases()) {
    // Ranges: empty at 0, empty in the middle, a prefix only, a suffix only, the full range,
    // decode rows, long extends crossing tiles, one entry whose queries all see nothing.
    std::vector<std::array<int32_t, 4>> reqs = {{70, 5, 0, 0}, {133, 40, 50, 50}, {300, 1, 0, 299},
                                                {257, 130, 127, 257}, {90, 90, 0, 90}, {45, 3, 0, 30}, {228, 128, 0, 120}};
    for (int i = 0; i < 3; ++i) {
      const int32_t qo = static_cast<int32_t>(rng.randint(1, 150));
      const int32_t seq = qo + static_cast<int32_t>(rng.randint(0, 300));
      const int32_t a = static_cast<int32_t>(rng.randint(0, seq));
      reqs.push_back({seq, qo, a, static_cast<int32_t>(rng.randint(a, seq))});
    }
    const Problem pr = make_problem(rng, c, reqs);
    const Result want = run(pr, Device::cpu(), false);
    for (bool plan : {false, true}) {
      const Result got = run(pr, testing::gpu(), plan);
      const std::string what = describe(c) + (plan ? " (host plan)" : " (validated)");
      EXPECT_LE(testing::rel_l2(got.out, testing::to_doubles(want.out)), out_tol(c.cache)) << what;
      expect_lse(got.lse, want.lse, lse_tol(c.cache), what);
    }
  }
}

TEST(CascadeAttentionCuda, LevelsMergedEqualSinglePass) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (const Case& c : cases()) {
    std::vector<std::array<int32_t, 4>> l1_reqs;
    for (int i = 0; i < 5; ++i) {
      const int32_t qo = static_cast<int32_t>(rng.randint(1, 200));
      const int32_t prefix = i == 0 ? 0 : static_cast<int32_t>(rng.randint(1, 400));
      const int32_t s = static_cast<int32_t>(rng.randint(0, prefix));
      l1_reqs.push_back({prefix + qo, qo, 0, s});
    }
    Problem l1 = make_problem(rng, c, l1_reqs);
    Problem l2 = l1, full = l1;
    for (size_t r = 0; r < l1_reqs.size(); ++r) {
      l2.kv_begin[r] = l1.kv_end[r];
      l2.kv_end[r] = l1.seq_lens[r];
      full.kv_begin[r] = 0;
      full.kv_end[r] = l1.seq_lens[r];
    }
    const Result a = run(l1, testing::gpu(), true), b = run(l2, testing::gpu(), true);
    const Result single = run(full, testing::gpu(), true);
    // Parts [2, n, ...] on the host (for the CPU twin) and on the GPU.
    const Tensor parts = testing::stack({a.out, b.out}), lse = testing::stack({a.lse, b.lse});
    Tensor merged = testing::to_gpu(testing::poisoned(a.out.shape(), DType::kF32));
    Tensor lm = testing::to_gpu(testing::poisoned(a.lse.shape(), DType::kF32));
    ops::merge_attention_states(testing::to_gpu(parts), testing::to_gpu(lse), merged, lm);
    // The two passes round differently from one pass (P and the split of the sums), so the
    // comparison is at the kernel tolerance, not bitwise.
    EXPECT_LE(testing::rel_l2(merged.to(Device::cpu()), testing::to_doubles(single.out)), out_tol(c.cache))
        << describe(c);
    expect_lse(lm.to(Device::cpu()), single.lse, lse_tol(c.cache), describe(c));
    // The merge kernel against its CPU twin on the same inputs.
    Tensor cpu_m = Tensor::empty(a.out.shape(), DType::kF32), cpu_l = Tensor::empty(a.lse.shape(), DType::kF32);
    ops::merge_attention_states(parts, lse, cpu_m, cpu_l);
    EXPECT_LE(testing::rel_l2(merged.to(Device::cpu()), testing::to_doubles(cpu_m)), 1e-6) << describe(c);
    expect_lse(lm.to(Device::cpu()), cpu_l, 1e-6, describe(c) + " merge vs CPU");
  }
}

TEST(CascadeAttentionCuda, ChunkedGroupLevelOne) {
  // The backend's grouped level 1 on the GPU: three requests' rows over a shared prefix, as one
  // entry per key chunk (chunk k on copy k of the rows, every entry on one page list: kv_indptr 0,
  // not CSR), with the host plan; K-way merged, it must equal each request's own prefix attention.
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const Case c{16, 2, 4, 128, dt, -1, 0.0f};
    const int32_t shared = 400, chunks = 5;
    const std::vector<int32_t> qo = {3, 1, 9};
    // Per-request reference problem: each request's pages begin with the same 25 pages.
    std::vector<std::array<int32_t, 4>> reqs;
    for (int32_t n : qo) reqs.push_back({shared + n, n, 0, shared});
    Problem per = make_problem(rng, c, reqs);
    const int32_t pages_shared = shared / 16;
    for (size_t r = 1; r < qo.size(); ++r) {
      std::copy(per.kv_indices.begin(), per.kv_indices.begin() + pages_shared,
                per.kv_indices.begin() + per.kv_indptr[r]);
    }
    const int32_t rows = per.qo_indptr.back();
    Problem chunked = per;
    chunked.qo_indptr = {0};
    chunked.kv_indptr.clear();
    chunked.seq_lens.clear();
    chunked.kv_begin.clear();
    chunked.kv_end.clear();
    for (int32_t k = 0; k < chunks; ++k) {
      chunked.qo_indptr.push_back((k + 1) * rows);
      chunked.kv_indptr.push_back(0);
      chunked.seq_lens.push_back(shared + rows);
      chunked.kv_begin.push_back(shared * k / chunks);
      chunked.kv_end.push_back(shared * (k + 1) / chunks);
    }
    chunked.kv_indptr.push_back(static_cast<int32_t>(per.kv_indices.size()));
    Tensor q_rep = Tensor::empty({chunks * rows, per.hq, c.d}, DType::kF32);
    for (int32_t k = 0; k < chunks; ++k) q_rep.slice(0, k * rows, (k + 1) * rows).copy_(per.q);
    chunked.q = q_rep;
    const Result got = run(chunked, testing::gpu(), true);
    Tensor merged = testing::to_gpu(testing::poisoned({rows, per.hq, c.d}, DType::kF32));
    ops::merge_attention_states(testing::to_gpu(got.out.view({chunks, rows, per.hq, c.d})),
                                testing::to_gpu(got.lse.view({chunks, rows, per.hq})), merged);
    const Result want = run(per, Device::cpu(), false);
    EXPECT_LE(testing::rel_l2(merged.to(Device::cpu()), testing::to_doubles(want.out)), out_tol(dt)) << describe(c);
  }
}

TEST(CascadeAttentionCuda, BadKeyRangeIsAnError) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  Problem pr = make_problem(rng, {1, 2, 2, 64, DType::kBF16, -1, 0.0f}, {{10, 2, 0, 10}, {12, 3, 0, 12}});
  pr.kv_end[1] = 13;  // past seq_len
  EXPECT_THROW(run(pr, testing::gpu(), false), Error);
}

}  // namespace
}  // namespace rlm
