// ops::paged_attention against a double-precision reference on random page tables, GQA ratios,
// head dims, page sizes, mixed decode/extend batches with cached prefixes, sliding window and
// logit soft-cap, a value head size of its own (split sizes); the batched call must equal
// per-request calls bit for bit, and a prefill's rows the same queries as decode steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cache/kv_pool.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::TestRng;

constexpr double kAttnTol = 1e-5;  // rel. L2 of the f32 kernel vs the double reference

struct Batch {
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0}, kv_indices, seq_lens;
  int64_t num_tokens = 0;
};

// Requests: (seq_len, qo_len). Pages are drawn without replacement from a shuffled pool.
Batch make_batch(TestRng& rng, const std::vector<std::pair<int32_t, int32_t>>& reqs, int64_t page_size,
                 int64_t num_pages) {
  std::vector<int32_t> pool(num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  Batch b;
  size_t next = 0;
  for (auto [seq_len, qo_len] : reqs) {
    const int64_t pages = (seq_len + page_size - 1) / page_size + rng.randint(0, 1);  // sometimes a spare page
    for (int64_t i = 0; i < pages; ++i) b.kv_indices.push_back(pool.at(next++));
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
    b.qo_indptr.push_back(b.qo_indptr.back() + qo_len);
    b.seq_lens.push_back(seq_len);
  }
  b.num_tokens = b.qo_indptr.back();
  return b;
}

std::vector<double> reference(const Tensor& q, const Tensor& kc, const Tensor& vc, const Batch& b, int64_t page_size,
                              const ops::AttentionParams& p) {
  const int64_t hq = q.size(1), hk = kc.size(1), d = q.size(2), dv = vc.size(2), group = hq / hk;
  std::vector<double> out(static_cast<size_t>(q.size(0) * hq * dv), 0.0);
  for (size_t r = 0; r < b.seq_lens.size(); ++r) {
    const int64_t seq_len = b.seq_lens[r], qo_len = b.qo_indptr[r + 1] - b.qo_indptr[r];
    auto slot = [&](int64_t pos) { return b.kv_indices[b.kv_indptr[r] + pos / page_size] * page_size + pos % page_size; };
    for (int64_t j = 0; j < qo_len; ++j) {
      const int64_t row = b.qo_indptr[r] + j, pos = seq_len - qo_len + j;
      for (int64_t h = 0; h < hq; ++h) {
        std::vector<double> s;
        std::vector<int64_t> keys;
        for (int64_t t = 0; t <= pos; ++t) {
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
        const double m = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - m));
        for (int64_t c = 0; c < dv; ++c) {
          double acc = 0;
          for (size_t i = 0; i < keys.size(); ++i) acc += s[i] * testing::element(vc, (slot(keys[i]) * hk + h / group) * dv + c);
          out[(row * hq + h) * dv + c] = acc / sum;
        }
      }
    }
  }
  return out;
}

Tensor run(const Tensor& q, const Tensor& kc, const Tensor& vc, const Batch& b, int64_t page_size,
           const ops::AttentionParams& p) {
  Tensor out = Tensor::empty({q.size(0), q.size(1), vc.size(2)}, DType::kF32);
  testing::poison(out);
  ops::paged_attention(q, kc, vc, Tensor::from_vector(b.qo_indptr), Tensor::from_vector(b.kv_indptr),
                       Tensor::from_vector(b.kv_indices), Tensor::from_vector(b.seq_lens), page_size, p, out);
  return out;
}

// The same requests one per call on slices of q; the rows must equal the batched rows bit for bit.
void expect_per_request_equal(const Tensor& q, const Tensor& kc, const Tensor& vc, const Batch& b, int64_t page_size,
                              const ops::AttentionParams& p, const Tensor& batched) {
  for (size_t r = 0; r < b.seq_lens.size(); ++r) {
    Batch one;
    one.qo_indptr = {0, b.qo_indptr[r + 1] - b.qo_indptr[r]};
    one.kv_indices.assign(b.kv_indices.begin() + b.kv_indptr[r], b.kv_indices.begin() + b.kv_indptr[r + 1]);
    one.kv_indptr = {0, static_cast<int32_t>(one.kv_indices.size())};
    one.seq_lens = {b.seq_lens[r]};
    const Tensor qr = q.slice(0, b.qo_indptr[r], b.qo_indptr[r + 1]).clone();
    const Tensor got = run(qr, kc, vc, one, page_size, p);
    EXPECT_TRUE(testing::bitwise_equal(got, batched.slice(0, b.qo_indptr[r], b.qo_indptr[r + 1])))
        << "request " << r << " alone differs from the batched call";
  }
}

TEST(OpsPagedAttention, MixedBatchMatchesReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t page_size : {1, 3, 16}) {
    for (int64_t group : {1, 2, 4}) {
      for (int64_t head_dim : {64, 128}) {
        for (int variant = 0; variant < 4; ++variant) {
          const int64_t hk = 2, hq = hk * group;
          ops::AttentionParams p;
          p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
          if (variant & 1) p.sliding_window = rng.randint(1, 12);
          if (variant & 2) p.logit_soft_cap = static_cast<float>(rng.uniform(1.0, 8.0));
          // Decode rows (qo_len 1), a fresh prefill, and extends over cached prefixes.
          std::vector<std::pair<int32_t, int32_t>> reqs = {
              {static_cast<int32_t>(rng.randint(1, 40)), 1},
              {static_cast<int32_t>(rng.randint(1, 20)), 0},
              {0, 0},
              {static_cast<int32_t>(rng.randint(1, 33)), 1}};
          reqs[1].second = reqs[1].first;  // prefill without a prefix
          const int32_t prefix = static_cast<int32_t>(rng.randint(1, 30)), ext = static_cast<int32_t>(rng.randint(2, 37));
          reqs.push_back({prefix + ext, ext});
          reqs.push_back({static_cast<int32_t>(rng.randint(1, 5)), 1});
          std::shuffle(reqs.begin(), reqs.end(), rng.gen());
          const int64_t num_pages = 200 / page_size + 16;
          const Batch b = make_batch(rng, reqs, page_size, num_pages);
          const int64_t slots = num_pages * page_size;
          // Random cache contents; slots that no request uses stay NaN so stray reads show.
          Tensor kc = Tensor::empty({slots, hk, head_dim}, DType::kF32), vc = Tensor::empty({slots, hk, head_dim}, DType::kF32);
          testing::poison(kc);
          testing::poison(vc);
          for (size_t r = 0; r < reqs.size(); ++r) {
            for (int64_t pos = 0; pos < b.seq_lens[r]; ++pos) {
              const int64_t s = b.kv_indices[b.kv_indptr[r] + pos / page_size] * page_size + pos % page_size;
              for (int64_t h = 0; h < hk; ++h) {
                for (int64_t c = 0; c < head_dim; ++c) {
                  kc.at<float>({s, h, c}) = rng.normal();
                  vc.at<float>({s, h, c}) = rng.normal();
                }
              }
            }
          }
          // q as a strided view of a fused qkv buffer.
          const Tensor qkv = testing::random_normal(rng, {b.num_tokens, hq + 2 * hk, head_dim}, 2.0f);
          const Tensor q = qkv.slice(1, 0, hq);
          SCOPED_TRACE(rlm::str("page_size ", page_size, " group ", group, " head_dim ", head_dim, " window ",
                                p.sliding_window, " soft_cap ", p.logit_soft_cap));
          for (DType cache_dtype : {DType::kF32, DType::kBF16}) {
            const Tensor k = cache_dtype == DType::kF32 ? kc : kc.to(cache_dtype);
            const Tensor v = cache_dtype == DType::kF32 ? vc : vc.to(cache_dtype);
            const Tensor out = run(q, k, v, b, page_size, p);
            EXPECT_LE(testing::rel_l2(out, reference(q, k, v, b, page_size, p)), kAttnTol) << dtype_name(cache_dtype);
            expect_per_request_equal(q, k, v, b, page_size, p, out);
          }
        }
      }
    }
  }
}

TEST(OpsPagedAttention, LongSequenceManyHeads) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t page_size = 16, hk = 3, hq = 9, d = 64;
  const Batch b = make_batch(rng, {{300, 129}, {257, 1}, {17, 17}}, page_size, 64);
  Tensor kc = testing::random_normal(rng, {64 * page_size, hk, d}), vc = testing::random_normal(rng, {64 * page_size, hk, d});
  const Tensor q = testing::random_normal(rng, {b.num_tokens, hq, d});
  ops::AttentionParams p;
  p.scale = 0.125f;
  const Tensor out = run(q, kc, vc, b, page_size, p);
  EXPECT_LE(testing::rel_l2(out, reference(q, kc, vc, b, page_size, p)), kAttnTol);
  expect_per_request_equal(q, kc, vc, b, page_size, p, out);
}

// Split head sizes: q/k of one size, v (and out) of another (MLA's 192/128, and the reverse and
// sizes that are not multiples of 8, which take the scalar loops); caches from a KVPool with its
// own v_head_dim, filled through store_kv_cache.
TEST(OpsPagedAttention, SplitValueHeadDim) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t page_size = 16, hk = 2, hq = 6;
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{192, 128}, {64, 96}, {20, 12}}) {
    const Batch b = make_batch(rng, {{70, 70}, {41, 1}, {90, 23}}, page_size, 24);
    const int64_t slots = 24 * page_size;
    const Tensor k_new = testing::random_normal(rng, {slots, hk, d}), v_new = testing::random_normal(rng, {slots, hk, dv});
    std::vector<int64_t> all(static_cast<size_t>(slots));
    std::iota(all.begin(), all.end(), 0);
    const Tensor q = testing::random_normal(rng, {b.num_tokens, hq, d}, 2.0f);
    ops::AttentionParams p;
    p.scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (DType cache_dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(rlm::str("head_dim ", d, " v_head_dim ", dv, " cache ", dtype_name(cache_dtype)));
      KVPoolConfig pc;
      pc.num_layers = 1;
      pc.num_pages = 24;
      pc.page_size = page_size;
      pc.num_kv_heads = hk;
      pc.head_dim = d;
      pc.v_head_dim = dv;
      pc.dtype = cache_dtype;
      const KVPool pool(pc);
      const Tensor& kc = pool.k_buffer(0);
      const Tensor& vc = pool.v_buffer(0);
      EXPECT_EQ(vc.shape(), (Shape{slots, hk, dv}));
      EXPECT_EQ(pool.bytes_per_token(), static_cast<size_t>(hk * (d + dv)) * dtype_size(cache_dtype));
      ops::store_kv_cache(k_new, v_new, kc, vc, Tensor::from_vector(all));
      const Tensor out = run(q, kc, vc, b, page_size, p);
      EXPECT_EQ(out.shape(), (Shape{b.num_tokens, hq, dv}));
      EXPECT_LE(testing::rel_l2(out, reference(q, kc, vc, b, page_size, p)), kAttnTol);
      expect_per_request_equal(q, kc, vc, b, page_size, p, out);
    }
  }
  // The output must have v's head size.
  const Tensor q = Tensor::zeros({3, 2, 32}, DType::kF32), kc = Tensor::zeros({8, 1, 32}, DType::kF32);
  const Tensor vc = Tensor::zeros({8, 1, 16}, DType::kF32), bad_out = Tensor::zeros({3, 2, 32}, DType::kF32);
  const std::string msg = testing::error_of([&] {
    ops::paged_attention(q, kc, vc, Tensor::from_vector<int32_t>({0, 3}), Tensor::from_vector<int32_t>({0, 1}),
                         Tensor::from_vector<int32_t>({0}), Tensor::from_vector<int32_t>({5}), 8,
                         ops::AttentionParams{}, bad_out);
  });
  EXPECT_NE(msg.find("v_cache's head size"), std::string::npos) << msg;
}

// A prefill's rows equal the same queries run one at a time as decode steps (each query alone,
// over the keys up to its position) bit for bit: the kernel scores keys four at a time, and how a
// query's keys fall into those groups must not depend on the other queries of its batch. Head
// sizes with an odd number of 8-float vectors (40) take the kernel's leftover paths.
TEST(OpsPagedAttention, PrefillRowsEqualDecodeSteps) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t page_size = 16, hk = 2, hq = 6, num_pages = 8;
  for (int64_t d : {40, 64}) {
    for (float soft_cap : {0.0f, 5.0f}) {
      SCOPED_TRACE(rlm::str("head_dim ", d, " soft_cap ", soft_cap));
      const int32_t seq_len = 83, qo_len = 45;  // a cached prefix of 38, then 45 new tokens
      const Batch b = make_batch(rng, {{seq_len, qo_len}}, page_size, num_pages);
      const Tensor kc = testing::random_normal(rng, {num_pages * page_size, hk, d});
      const Tensor vc = testing::random_normal(rng, {num_pages * page_size, hk, d});
      const Tensor q = testing::random_normal(rng, {qo_len, hq, d}, 2.0f);
      ops::AttentionParams p;
      p.scale = 1.0f / std::sqrt(static_cast<float>(d));
      p.logit_soft_cap = soft_cap;
      const Tensor out = run(q, kc, vc, b, page_size, p);
      EXPECT_LE(testing::rel_l2(out, reference(q, kc, vc, b, page_size, p)), kAttnTol);
      for (int32_t j = 0; j < qo_len; ++j) {
        Batch step = b;
        step.qo_indptr = {0, 1};
        step.seq_lens = {seq_len - qo_len + j + 1};
        step.num_tokens = 1;
        const Tensor got = run(q.slice(0, j, j + 1).clone(), kc, vc, step, page_size, p);
        EXPECT_TRUE(testing::bitwise_equal(got, out.slice(0, j, j + 1))) << "query " << j;
      }
    }
  }
}

TEST(OpsPagedAttention, BadIndexDataIsAnError) {
  const Tensor q = Tensor::zeros({3, 2, 4}, DType::kF32), out = Tensor::zeros({3, 2, 4}, DType::kF32);
  const Tensor kc = Tensor::zeros({8, 1, 4}, DType::kF32);
  auto call = [&](std::vector<int32_t> qo, std::vector<int32_t> kv, std::vector<int32_t> idx, std::vector<int32_t> sl,
                  int64_t page_size) {
    return testing::error_of([&] {
      ops::paged_attention(q, kc, kc, Tensor::from_vector(qo), Tensor::from_vector(kv), Tensor::from_vector(idx),
                           Tensor::from_vector(sl), page_size, ops::AttentionParams{}, out);
    });
  };
  EXPECT_EQ(call({0, 3}, {0, 2}, {0, 1}, {5}, 4), "");
  std::string msg = call({0, 3}, {0, 2}, {0, 1}, {2}, 4);
  EXPECT_NE(msg.find("request 0: seq_len 2 is smaller than its query count 3"), std::string::npos) << msg;
  msg = call({0, 3}, {0, 1}, {0}, {5}, 4);
  EXPECT_NE(msg.find("1 pages of 4 slots cannot hold seq_len 5"), std::string::npos) << msg;
  msg = call({0, 3}, {0, 2}, {0, 2}, {5}, 4);
  EXPECT_NE(msg.find("page index 2 (kv_indices[1]) is outside the KV pool of 8 slots"), std::string::npos) << msg;
  msg = call({0, 4}, {0, 2}, {0, 1}, {5}, 4);
  EXPECT_NE(msg.find("qo_indptr[1] = 4"), std::string::npos) << msg;
  msg = call({0, 3}, {0, 2}, {0, 1}, {5, 5}, 4);
  EXPECT_NE(msg.find("qo_indptr i32[2] cpu: dimension 0 must be [bs + 1] = 3"), std::string::npos) << msg;
  const Tensor q3 = Tensor::zeros({3, 3, 4}, DType::kF32);
  const Tensor kc2 = Tensor::zeros({8, 2, 4}, DType::kF32);
  msg = testing::error_of([&] {
    ops::paged_attention(q3, kc2, kc2, Tensor::from_vector<int32_t>({0, 3}), Tensor::from_vector<int32_t>({0, 2}),
                         Tensor::from_vector<int32_t>({0, 1}), Tensor::from_vector<int32_t>({5}), 4,
                         ops::AttentionParams{}, q3);
  });
  EXPECT_NE(msg.find("num_qo_heads 3"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlm
