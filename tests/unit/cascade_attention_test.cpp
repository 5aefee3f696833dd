// Cascade attention on the CPU: ops::paged_attention_partial (key ranges + log-sum-exp) against a
// double-precision reference; two partial passes merged by ops::merge_attention_states against the
// single pass; the level-1 batch of a grouped cascade plan (several requests' queries over one
// shared prefix) against per-request references; make_cascade_plan's grouping rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attention/cascade_plan.h"
#include "cache/kv_pool.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::TestRng;

constexpr double kTol = 1e-5;  // rel. L2 of f32 kernels vs the double reference

struct Req {
  int32_t seq_len, qo_len, kv_begin, kv_end;
};

struct Batch {
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0}, kv_indices, seq_lens, kv_begin, kv_end;
  int64_t num_tokens = 0;
};

Batch make_batch(TestRng& rng, const std::vector<Req>& reqs, int64_t page_size, int64_t num_pages) {
  std::vector<int32_t> pool(num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  Batch b;
  size_t next = 0;
  for (const Req& r : reqs) {
    const int64_t pages = (r.seq_len + page_size - 1) / page_size;
    for (int64_t i = 0; i < pages; ++i) b.kv_indices.push_back(pool.at(next++));
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
    b.qo_indptr.push_back(b.qo_indptr.back() + r.qo_len);
    b.seq_lens.push_back(r.seq_len);
    b.kv_begin.push_back(r.kv_begin);
    b.kv_end.push_back(r.kv_end);
  }
  b.num_tokens = b.qo_indptr.back();
  return b;
}

// out [num_tokens, hq, d] and lse [num_tokens, hq] in double; a row without keys: zeros, -inf.
void reference(const Tensor& q, const Tensor& kc, const Tensor& vc, const Batch& b, int64_t page_size,
               const ops::AttentionParams& p, std::vector<double>& out, std::vector<double>& lse) {
  const int64_t hq = q.size(1), hk = kc.size(1), d = q.size(2), group = hq / hk;
  out.assign(q.numel(), 0.0);
  lse.assign(q.size(0) * hq, -std::numeric_limits<double>::infinity());
  for (size_t r = 0; r < b.seq_lens.size(); ++r) {
    const int64_t seq_len = b.seq_lens[r], qo_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    auto slot = [&](int64_t pos) { return b.kv_indices[b.kv_indptr[r] + pos / page_size] * page_size + pos % page_size; };
    for (int64_t j = 0; j < qo_len; ++j) {
      const int64_t row = b.qo_indptr[r] + j, pos = seq_len - qo_len + j;
      for (int64_t h = 0; h < hq; ++h) {
        std::vector<double> s;
        std::vector<int64_t> keys;
        for (int64_t t = b.kv_begin[r]; t < b.kv_end[r] && t <= pos; ++t) {
          if (p.sliding_window > 0 && !(t > pos - p.sliding_window)) continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += static_cast<double>(q.at<float>({row, h, c})) * testing::element(kc, (slot(t) * hk + h / group) * d + c);
          }
          dot *= p.scale;
          if (p.logit_soft_cap > 0) dot = p.logit_soft_cap * std::tanh(dot / p.logit_soft_cap);
          s.push_back(dot);
          keys.push_back(t);
        }
        if (keys.empty()) continue;
        const double m = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - m));
        lse[row * hq + h] = m + std::log(sum);
        for (int64_t c = 0; c < d; ++c) {
          double acc = 0;
          for (size_t i = 0; i < keys.size(); ++i) acc += s[i] * testing::element(vc, (slot(keys[i]) * hk + h / group) * d + c);
          out[(row * hq + h) * d + c] = acc / sum;
        }
      }
    }
  }
}

void run_partial(const Tensor& q, const Tensor& kc, const Tensor& vc, const Batch& b, int64_t page_size,
                 const ops::AttentionParams& p, Tensor& out, Tensor& lse) {
  out = Tensor::empty(q.shape(), DType::kF32);
  lse = Tensor::empty({q.size(0), q.size(1)}, DType::kF32);
  testing::poison(out);
  testing::poison(lse);
  ops::paged_attention_partial(q, kc, vc, Tensor::from_vector(b.qo_indptr), Tensor::from_vector(b.kv_indptr),
                               Tensor::from_vector(b.kv_indices), Tensor::from_vector(b.seq_lens),
                               Tensor::from_vector(b.kv_begin), Tensor::from_vector(b.kv_end), page_size, p, out, lse);
}

// lse values: -inf must match exactly, finite ones within abs 1e-5 * max(1, |x|).
void expect_lse_near(const Tensor& lse, const std::vector<double>& want) {
  ASSERT_EQ(lse.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < lse.numel(); ++i) {
    const double got = lse.data<float>()[i];
    if (std::isinf(want[i])) {
      EXPECT_TRUE(std::isinf(got) && got < 0) << "lse[" << i << "] = " << got << ", want -inf";
    } else {
      EXPECT_NEAR(got, want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << "lse[" << i << "]";
    }
  }
}

struct CaseShape {
  int64_t hq, hk, d, page_size;
  DType cache;
  int64_t window;
  float cap;
};

class CascadeOps : public ::testing::TestWithParam<CaseShape> {};

TEST_P(CascadeOps, PartialMatchesReferenceAndMergedEqualsSinglePass) {
  const CaseShape sh = GetParam();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
  p.sliding_window = sh.window;
  p.logit_soft_cap = sh.cap;
  // Requests with cached prefixes of assorted lengths (0, inside a page, whole pages), decode rows
  // (qo_len 1) and long extends; the split point s is drawn in [0, prefix].
  std::vector<Req> reqs;
  for (int i = 0; i < 6; ++i) {
    const int32_t qo = i == 0 ? 1 : static_cast<int32_t>(rng.randint(1, 40));
    const int32_t prefix = i == 1 ? 0 : static_cast<int32_t>(rng.randint(1, 90));
    const int32_t s = i == 2 ? prefix : static_cast<int32_t>(rng.randint(0, prefix));
    reqs.push_back({prefix + qo, qo, 0, s});  // level 1: [0, s)
  }
  const int64_t num_pages = 600 / sh.page_size + 16;
  Batch l1 = make_batch(rng, reqs, sh.page_size, num_pages);
  Batch l2 = l1;
  Batch full = l1;
  for (size_t r = 0; r < reqs.size(); ++r) {
    l2.kv_begin[r] = l1.kv_end[r];
    l2.kv_end[r] = l1.seq_lens[r];
    full.kv_begin[r] = 0;
    full.kv_end[r] = l1.seq_lens[r];
  }
  const int64_t slots = num_pages * sh.page_size;
  const Tensor q = testing::random_normal(rng, {l1.num_tokens, sh.hq, sh.d});
  const Tensor kc = testing::random_normal(rng, {slots, sh.hk, sh.d}).to(sh.cache);
  const Tensor vc = testing::random_normal(rng, {slots, sh.hk, sh.d}).to(sh.cache);

  Tensor o1, lse1, o2, lse2, of, lsef;
  run_partial(q, kc, vc, l1, sh.page_size, p, o1, lse1);
  run_partial(q, kc, vc, l2, sh.page_size, p, o2, lse2);
  run_partial(q, kc, vc, full, sh.page_size, p, of, lsef);
  std::vector<double> want_o, want_lse;
  reference(q, kc, vc, l1, sh.page_size, p, want_o, want_lse);
  EXPECT_LT(testing::rel_l2(o1, want_o), kTol);
  expect_lse_near(lse1, want_lse);
  reference(q, kc, vc, l2, sh.page_size, p, want_o, want_lse);
  EXPECT_LT(testing::rel_l2(o2, want_o), kTol);
  expect_lse_near(lse2, want_lse);
  reference(q, kc, vc, full, sh.page_size, p, want_o, want_lse);
  EXPECT_LT(testing::rel_l2(of, want_o), kTol);
  expect_lse_near(lsef, want_lse);

  // The full-range partial pass is the ordinary kernel: same bits as ops::paged_attention.
  Tensor plain = Tensor::empty(q.shape(), DType::kF32);
  ops::paged_attention(q, kc, vc, Tensor::from_vector(full.qo_indptr), Tensor::from_vector(full.kv_indptr),
                       Tensor::from_vector(full.kv_indices), Tensor::from_vector(full.seq_lens), sh.page_size, p,
                       plain);
  EXPECT_TRUE(testing::bitwise_equal(plain, of));

  // Merged levels == single pass.
  Tensor merged = Tensor::empty(q.shape(), DType::kF32);
  Tensor lse_m = Tensor::empty({q.size(0), sh.hq}, DType::kF32);
  testing::poison(merged);
  ops::merge_attention_states(testing::stack({o1, o2}), testing::stack({lse1, lse2}), merged, lse_m);
  EXPECT_LT(testing::rel_l2(merged, want_o), kTol);
  expect_lse_near(lse_m, want_lse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CascadeOps,
    ::testing::Values(CaseShape{4, 4, 64, 1, DType::kF32, -1, 0.0f}, CaseShape{8, 2, 128, 16, DType::kBF16, -1, 0.0f},
                      CaseShape{8, 1, 64, 4, DType::kF16, -1, 30.0f}, CaseShape{4, 2, 64, 1, DType::kF32, 24, 0.0f},
                      CaseShape{6, 3, 256, 64, DType::kBF16, 50, 20.0f}, CaseShape{2, 1, 40, 3, DType::kF32, -1, 0.0f}));

TEST(CascadeOps, GroupedLevelOneMatchesPerRequestPrefix) {
  // Three requests share the first 48 pages-of-1 of their sequences; the level-1 entry of the
  // group holds all their query rows at positions after the shared prefix.
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t hq = 8, hk = 2, d = 64, shared = 48;
  ops::AttentionParams p;
  p.scale = 0.125f;
  std::vector<int32_t> common(shared);
  std::iota(common.begin(), common.end(), 0);
  std::vector<int32_t> qo = {5, 1, 17};
  Batch per;
  int32_t next = shared;
  for (int32_t n : qo) {
    const int32_t extra = static_cast<int32_t>(rng.randint(0, 10));  // a longer private prefix
    const int32_t seq = shared + extra + n;
    per.kv_indices.insert(per.kv_indices.end(), common.begin(), common.end());
    for (int32_t i = shared; i < seq; ++i) per.kv_indices.push_back(next++);
    per.kv_indptr.push_back(static_cast<int32_t>(per.kv_indices.size()));
    per.qo_indptr.push_back(per.qo_indptr.back() + n);
    per.seq_lens.push_back(seq);
    per.kv_begin.push_back(0);
    per.kv_end.push_back(shared);
  }
  per.num_tokens = per.qo_indptr.back();
  const Tensor q = testing::random_normal(rng, {per.num_tokens, hq, d});
  const Tensor kc = testing::random_normal(rng, {next, hk, d}).to(DType::kBF16);
  const Tensor vc = testing::random_normal(rng, {next, hk, d}).to(DType::kBF16);
  Batch group;
  group.qo_indptr = {0, static_cast<int32_t>(per.num_tokens)};
  group.kv_indptr = {0, per.kv_indptr.back()};
  group.kv_indices = per.kv_indices;
  group.seq_lens = {static_cast<int32_t>(shared + per.num_tokens)};
  group.kv_begin = {0};
  group.kv_end = {static_cast<int32_t>(shared)};
  group.num_tokens = per.num_tokens;
  Tensor og, lseg;
  run_partial(q, kc, vc, group, 1, p, og, lseg);
  std::vector<double> want_o, want_lse;
  reference(q, kc, vc, per, 1, p, want_o, want_lse);
  EXPECT_LT(testing::rel_l2(og, want_o), kTol);
  expect_lse_near(lseg, want_lse);
}

TEST(CascadeOps, MergeHandlesEmptyParts) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t k = 3, n = 3, h = 2, d = 8;
  const Tensor parts = testing::random_normal(rng, {k, n, h, d});
  // Per (row, head): some parts empty (-inf), all empty, none empty.
  const Tensor lse = Tensor::from_vector(std::vector<float>{-inf, 0.5f, -inf, 2.0f, 1.0f, -3.0f,   // part 0
                                                            1.5f, -inf, -inf, 2.0f, 0.0f, 4.0f,    // part 1
                                                            -inf, -1.0f, -inf, -inf, 3.0f, 4.0f})  // part 2
                         .view({k, n, h});
  Tensor out = Tensor::empty({n, h, d}, DType::kF32);
  Tensor lo = Tensor::empty({n, h}, DType::kF32);
  testing::poison(out);
  ops::merge_attention_states(parts, lse, out, lo);
  for (int64_t i = 0; i < n * h; ++i) {
    double m = -inf;
    for (int64_t p = 0; p < k; ++p) m = std::max<double>(m, lse.data<float>()[p * n * h + i]);
    double wsum = 0;
    for (int64_t p = 0; p < k; ++p) wsum += std::isinf(m) ? 0.0 : std::exp(lse.data<float>()[p * n * h + i] - m);
    for (int64_t c = 0; c < d; ++c) {
      double want = 0;
      for (int64_t p = 0; p < k && !std::isinf(m); ++p) {
        want += std::exp(lse.data<float>()[p * n * h + i] - m) * parts.data<float>()[(p * n * h + i) * d + c] / wsum;
      }
      EXPECT_NEAR(out.data<float>()[i * d + c], want, 1e-6) << "row " << i << " col " << c;
    }
    if (std::isinf(m)) {
      EXPECT_TRUE(std::isinf(lo.data<float>()[i]));
    } else {
      EXPECT_NEAR(lo.data<float>()[i], m + std::log(wsum), 1e-6);
    }
  }
  EXPECT_THROW(ops::merge_attention_states(parts, lse.slice(0, 0, 2), out), Error);   // part counts differ
  EXPECT_THROW(ops::merge_attention_states(parts, lse, out.slice(0, 0, 2)), Error);  // row counts differ
}

TEST(CascadeOps, ChunkedLevelOneEntriesShareAPageList) {
  // The backend's level-1 layout with 3 key chunks: entry k reads copy k of the rows and keys
  // [shared * k / 3, shared * (k + 1) / 3) of one page list (kv_indptr 0 for every entry, not CSR).
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t hq = 4, hk = 2, d = 64, shared = 100, rows = 7, chunks = 3;
  Batch one = make_batch(rng, {{static_cast<int32_t>(shared + rows), static_cast<int32_t>(rows), 0,
                                static_cast<int32_t>(shared)}},
                         1, 200);
  const Tensor q = testing::random_normal(rng, {rows, hq, d});
  const Tensor kc = testing::random_normal(rng, {200, hk, d});
  const Tensor vc = testing::random_normal(rng, {200, hk, d});
  Batch chunked;
  chunked.kv_indices = one.kv_indices;
  chunked.kv_indptr.clear();
  chunked.num_tokens = chunks * rows;
  for (int64_t k = 0; k < chunks; ++k) {
    chunked.qo_indptr.push_back(static_cast<int32_t>((k + 1) * rows));
    chunked.kv_indptr.push_back(0);
    chunked.seq_lens.push_back(static_cast<int32_t>(shared + rows));
    chunked.kv_begin.push_back(static_cast<int32_t>(shared * k / chunks));
    chunked.kv_end.push_back(static_cast<int32_t>(shared * (k + 1) / chunks));
  }
  chunked.kv_indptr.push_back(static_cast<int32_t>(one.kv_indices.size()));
  Tensor q3 = Tensor::empty({chunks * rows, hq, d}, DType::kF32);
  for (int64_t k = 0; k < chunks; ++k) q3.slice(0, k * rows, (k + 1) * rows).copy_(q);
  Tensor o3, lse3;
  run_partial(q3, kc, vc, chunked, 1, ops::AttentionParams{}, o3, lse3);
  Tensor merged = Tensor::empty({rows, hq, d}, DType::kF32);
  ops::merge_attention_states(o3.view({chunks, rows, hq, d}), lse3.view({chunks, rows, hq}), merged);
  std::vector<double> want_o, want_lse;
  reference(q, kc, vc, one, 1, ops::AttentionParams{}, want_o, want_lse);
  EXPECT_LT(testing::rel_l2(merged, want_o), kTol);
}

TEST(CascadeOps, BadKeyRangesAreErrors) {
  TestRng rng;
  const Batch b = make_batch(rng, {{10, 3, 0, 10}, {8, 8, 0, 8}}, 1, 32);
  const Tensor q = testing::random_normal(rng, {b.num_tokens, 2, 64});
  const Tensor kc = testing::random_normal(rng, {32, 2, 64});
  for (auto [begin, end] : {std::pair{5, 4}, {-1, 3}, {0, 11}}) {
    Batch bad = b;
    bad.kv_begin[0] = begin;
    bad.kv_end[0] = end;
    Tensor out, lse;
    try {
      run_partial(q, kc, kc, bad, 1, ops::AttentionParams{}, out, lse);
      ADD_FAILURE() << "no error for [" << begin << ", " << end << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("request 0"), std::string::npos) << e.what();
    }
  }
}

// ---- make_cascade_plan ----

struct PlanFixture {
  ReqToTokenPool r2t{8, 512, Device::cpu()};
  ForwardBatch batch;
  std::vector<int32_t> kv_indptr{0};

  // Request i: pool row i, slots = prefix slots then fresh ones.
  void add(const std::vector<int32_t>& slots, int32_t extend, int64_t page_size) {
    const int64_t r = batch.batch_size++;
    int32_t* row = r2t.table().data<int32_t>() + r * r2t.table().size(1);
    std::copy(slots.begin(), slots.end(), row);
    const int32_t seq = static_cast<int32_t>(slots.size());
    batch.seq_lens_cpu.push_back(seq);
    batch.extend_lens_cpu.push_back(extend);
    batch.prefix_lens_cpu.push_back(seq - extend);
    batch.req_pool_indices_cpu.push_back(static_cast<int32_t>(r));
    kv_indptr.push_back(kv_indptr.back() + static_cast<int32_t>((seq + page_size - 1) / page_size));
  }
};

std::vector<int32_t> range(int32_t a, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), a);
  return v;
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(CascadePlan, GroupsAdjacentRequestsSharingPages) {
  PlanFixture f;
  const std::vector<int32_t> shared = range(0, 128);
  f.add(cat(shared, range(1000, 20)), 20, 1);           // 0: shares 128
  f.add(cat(shared, range(2000, 30)), 10, 1);           // 1: shares 128 (20 more cached)
  f.add(cat(range(0, 100), range(3000, 5)), 5, 1);      // 2: shares 100 with 0 — joins, group to 100
  f.add(cat(range(5000, 200), range(6000, 3)), 3, 1);   // 3: own prefix, alone
  f.add(range(7000, 40), 40, 1);                        // 4: no prefix
  const CascadePlan auto_plan = make_cascade_plan(CascadeMode::kAuto, f.batch, f.kv_indptr, f.r2t.table(), 1);
  ASSERT_TRUE(auto_plan.enabled);
  EXPECT_TRUE(auto_plan.grouped);
  EXPECT_EQ(auto_plan.first, (std::vector<int32_t>{0, 3, 4, 5}));
  EXPECT_EQ(auto_plan.shared_len, (std::vector<int32_t>{100, 0, 0}));  // lone requests: empty level 1
  EXPECT_EQ(auto_plan.num_chunks, 2);  // one query tile over 100 shared keys: 2 chunks of >= 64 keys
  EXPECT_EQ(auto_plan.l1_qo_indptr, (std::vector<int32_t>{0, 35, 38, 78, 113, 116, 156}));  // 2 row copies
  EXPECT_EQ(auto_plan.l1_kv_begin, (std::vector<int32_t>{0, 0, 0, 50, 0, 0}));
  EXPECT_EQ(auto_plan.l1_kv_end, (std::vector<int32_t>{50, 0, 0, 100, 0, 0}));
  EXPECT_EQ(auto_plan.l1_seq_lens[0], 100 + 35);
  EXPECT_EQ(auto_plan.l2_kv_begin, (std::vector<int32_t>{100, 100, 100, 0, 0}));
  EXPECT_EQ(auto_plan.saved_prefix_reads, 2 * 100);
  const CascadePlan on = make_cascade_plan(CascadeMode::kOn, f.batch, f.kv_indptr, f.r2t.table(), 1);
  EXPECT_EQ(on.shared_len, (std::vector<int32_t>{100, 200, 0}));  // request 3's own prefix
  EXPECT_EQ(on.l1_seq_lens[1], 203);                              // at its true positions
  EXPECT_FALSE(make_cascade_plan(CascadeMode::kOff, f.batch, f.kv_indptr, f.r2t.table(), 1).enabled);
  f.batch.mode = ForwardMode::kDecode;
  EXPECT_FALSE(make_cascade_plan(CascadeMode::kOn, f.batch, f.kv_indptr, f.r2t.table(), 1).enabled);
}

TEST(CascadePlan, AutoNeedsAGroupAndWholePages) {
  PlanFixture f;
  // Page size 16: the two requests share 70 slots = 4 whole pages (64 tokens) + a partial page.
  const std::vector<int32_t> shared = range(0, 70);
  f.add(cat(shared, range(1000, 10)), 10, 16);
  f.add(cat(shared, range(2000, 26)), 26, 16);
  const CascadePlan plan = make_cascade_plan(CascadeMode::kAuto, f.batch, f.kv_indptr, f.r2t.table(), 16);
  ASSERT_TRUE(plan.enabled);
  EXPECT_EQ(plan.shared_len, (std::vector<int32_t>{64}));
  PlanFixture g;  // shares only 48 tokens: below kMinSharedPrefix, no group, so no cascade in auto
  g.add(cat(range(0, 48), range(1000, 10)), 10, 16);
  g.add(cat(range(0, 48), range(2000, 10)), 10, 16);
  EXPECT_FALSE(make_cascade_plan(CascadeMode::kAuto, g.batch, g.kv_indptr, g.r2t.table(), 16).enabled);
  EXPECT_TRUE(make_cascade_plan(CascadeMode::kOn, g.batch, g.kv_indptr, g.r2t.table(), 16).enabled);
  EXPECT_FALSE(parse_cascade_mode("sometimes").is_ok());
}

TEST(CascadePlan, AutoSkipsGroupsThatSaveNoWork) {
  // Two requests with long new parts (2 x 300 rows) over a 100-token shared prefix: the level-1
  // pass would walk the prefix for as many query tiles as the single pass does.
  PlanFixture f;
  f.add(cat(range(0, 100), range(1000, 300)), 300, 1);
  f.add(cat(range(0, 100), range(2000, 300)), 300, 1);
  EXPECT_FALSE(make_cascade_plan(CascadeMode::kAuto, f.batch, f.kv_indptr, f.r2t.table(), 1).enabled);
  const CascadePlan on = make_cascade_plan(CascadeMode::kOn, f.batch, f.kv_indptr, f.r2t.table(), 1);
  EXPECT_TRUE(on.enabled && on.grouped);  // `on` keeps every group
  // Eight requests of 4 new tokens each over the same prefix: one level-1 tile instead of eight.
  PlanFixture g;
  for (int i = 0; i < 8; ++i) g.add(cat(range(0, 100), range(1000 + 10 * i, 4)), 4, 1);
  const CascadePlan plan = make_cascade_plan(CascadeMode::kAuto, g.batch, g.kv_indptr, g.r2t.table(), 1);
  ASSERT_TRUE(plan.enabled);
  EXPECT_EQ(plan.first, (std::vector<int32_t>{0, 8}));
  // One query tile over 100 shared keys: chunks of >= 64 keys, so 2, each over its copy of the rows.
  EXPECT_EQ(plan.num_chunks, 2);
  EXPECT_EQ(plan.l1_qo_indptr, (std::vector<int32_t>{0, 32, 64}));
  EXPECT_EQ(plan.l1_kv_begin, (std::vector<int32_t>{0, 50}));
  EXPECT_EQ(plan.l1_kv_end, (std::vector<int32_t>{50, 100}));
  EXPECT_EQ(cascade_num_chunks(1, 4096), 16);
  EXPECT_EQ(cascade_num_chunks(4, 4096), 4);
  EXPECT_EQ(cascade_num_chunks(32, 4096), 1);
}

}  // namespace
}  // namespace rlm
