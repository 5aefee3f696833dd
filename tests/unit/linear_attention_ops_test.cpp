// The Gated DeltaNet and MoE ops on the CPU: chunked vs recurrent gated delta rule vs a
// double-precision token loop, batching, snapshots, conv prefill vs decode, MoE vs plain loops,
// and errors on bad inputs. Fresh random inputs per run (the seed is printed on failure).
#include "ops/linear_attention_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>

#include "formats/gguf_dequant.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace rlm {
namespace {

using testing::bitwise_equal;
using testing::error_of;
using testing::rel_l2;
using testing::TestRng;

constexpr double kTol = 2e-5;  // fp32 rel. L2 against the double-precision reference

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector(v); }

ops::StateSegments segments(const std::vector<int32_t>& lens, const std::vector<int32_t>& slots,
                            const std::vector<int32_t>& has_init, const std::vector<int32_t>& track_slots = {},
                            const std::vector<int32_t>& track_lens = {}) {
  std::vector<int32_t> indptr{0};
  for (int32_t l : lens) indptr.push_back(indptr.back() + l);
  ops::StateSegments s;
  s.qo_indptr = i32(indptr);
  s.state_slots = i32(slots);
  s.has_initial_state = i32(has_init);
  if (!track_slots.empty()) {
    s.track_slots = i32(track_slots);
    s.track_lens = i32(track_lens);
  }
  return s;
}

Tensor uniform(TestRng& rng, Shape shape, double lo, double hi) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.uniform(lo, hi));
  return t;
}

// One GDN problem: inputs for num_tokens rows and a state pool.
struct Gdr {
  int64_t hk = 2, hv = 4, dk = 16, dv = 12, slots = 8;
  Tensor q, k, v, g, beta, state;
  Gdr(TestRng& rng, int64_t n) {
    q = testing::random_normal(rng, {n, hk, dk});
    k = testing::random_normal(rng, {n, hk, dk});
    v = testing::random_normal(rng, {n, hv, dv});
    g = uniform(rng, {n, hv}, -0.6, -0.01);
    beta = uniform(rng, {n, hv}, 0.05, 0.95);
    state = testing::random_normal(rng, {slots, hv, dk, dv}, 0.5f);
  }
  ops::GatedDeltaRuleParams params() const {
    ops::GatedDeltaRuleParams p;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
    return p;
  }
};

// The recurrence in double for rows [row0, row0 + n) from state s0 ([hv, dk, dv], or zeros).
// Returns the outputs [n, hv, dv]; s0 becomes the final state.
std::vector<double> reference_gdr(const Gdr& p, int64_t row0, int64_t n, std::vector<double>& s) {
  std::vector<double> out(n * p.hv * p.dv);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.dk));
  for (int64_t h = 0; h < p.hv; ++h) {
    const int64_t kh = h / (p.hv / p.hk);
    double* S = &s[h * p.dk * p.dv];
    for (int64_t t = row0; t < row0 + n; ++t) {
      std::vector<double> q(p.dk), k(p.dk);
      double nq = 0, nk = 0;
      for (int64_t d = 0; d < p.dk; ++d) {
        q[d] = p.q.at<float>({t, kh, d});
        k[d] = p.k.at<float>({t, kh, d});
        nq += q[d] * q[d];
        nk += k[d] * k[d];
      }
      for (int64_t d = 0; d < p.dk; ++d) {
        q[d] = q[d] / std::sqrt(nq + 1e-6) * scale;
        k[d] = k[d] / std::sqrt(nk + 1e-6);
      }
      const double decay = std::exp(static_cast<double>(p.g.at<float>({t, h})));
      const double b = p.beta.at<float>({t, h});
      for (int64_t i = 0; i < p.dk * p.dv; ++i) S[i] *= decay;
      for (int64_t e = 0; e < p.dv; ++e) {
        double mem = 0;
        for (int64_t d = 0; d < p.dk; ++d) mem += S[d * p.dv + e] * k[d];
        const double delta = (p.v.at<float>({t, h, e}) - mem) * b;
        for (int64_t d = 0; d < p.dk; ++d) S[d * p.dv + e] += k[d] * delta;
      }
      for (int64_t e = 0; e < p.dv; ++e) {
        double o = 0;
        for (int64_t d = 0; d < p.dk; ++d) o += S[d * p.dv + e] * q[d];
        out[((t - row0) * p.hv + h) * p.dv + e] = o;
      }
    }
  }
  return out;
}

std::vector<double> slot_state(const Tensor& state, int64_t slot) {
  return testing::to_doubles(state.select(0, slot));
}

using GdrFn = void (*)(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const ops::StateSegments&, const ops::GatedDeltaRuleParams&, const Tensor&);

TEST(GatedDeltaRule, ChunkedAndRecurrentMatchDoubleReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t n : {1, 63, 64, 65, 200}) {
    for (bool with_state : {false, true}) {
      SCOPED_TRACE("length " + std::to_string(n) + (with_state ? " with initial state" : " from zeros"));
      Gdr p(rng, n);
      std::vector<double> s = with_state ? slot_state(p.state, 3) : std::vector<double>(p.hv * p.dk * p.dv, 0.0);
      const std::vector<double> want = reference_gdr(p, 0, n, s);
      for (GdrFn fn : {static_cast<GdrFn>(ops::chunk_gated_delta_rule), static_cast<GdrFn>(ops::recurrent_gated_delta_rule)}) {
        Tensor state = p.state.clone();
        Tensor out = Tensor::empty({n, p.hv, p.dv}, DType::kF32);
        testing::poison(out);
        fn(p.q, p.k, p.v, p.g, p.beta, state, segments({static_cast<int32_t>(n)}, {3}, {with_state ? 1 : 0}),
           p.params(), out);
        EXPECT_LE(rel_l2(out, want), kTol);
        EXPECT_LE(rel_l2(slot_state(state, 3), s), kTol);
        EXPECT_TRUE(bitwise_equal(state.select(0, 2), p.state.select(0, 2))) << "another slot was written";
      }
    }
  }
}

TEST(GatedDeltaRule, ChunkedMatchesRecurrentWithSmallChunks) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  Gdr p(rng, 50);
  Tensor s1 = p.state.clone(), s2 = p.state.clone();
  Tensor o1 = Tensor::empty({50, p.hv, p.dv}, DType::kF32), o2 = Tensor::empty({50, p.hv, p.dv}, DType::kF32);
  ops::GatedDeltaRuleParams params = p.params();
  params.chunk_size = 7;  // many partial chunks
  ops::chunk_gated_delta_rule(p.q, p.k, p.v, p.g, p.beta, s1, segments({50}, {1}, {1}), params, o1);
  ops::recurrent_gated_delta_rule(p.q, p.k, p.v, p.g, p.beta, s2, segments({50}, {1}, {1}), params, o2);
  EXPECT_LE(rel_l2(o1, testing::to_doubles(o2)), kTol);
  EXPECT_LE(rel_l2(s1, testing::to_doubles(s2)), kTol);
}

TEST(GatedDeltaRule, StridedHeadViewsEqualContiguousInputs) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 70;
  Gdr p(rng, n);
  // q | k | v of each token in one row of stride 144 (a multiple of dk 16 and dv 12), as
  // GatedDeltaNetBackend lays out the conv output; the ops get [n, heads, dim] views of it.
  const int64_t row = 144, kq = p.hk * p.dk;
  Tensor flat = Tensor::empty({n * row + 2 * kq}, DType::kF32);
  testing::poison(flat);
  auto heads = [&](int64_t offset, int64_t h, int64_t d) {
    return flat.slice(0, offset, offset + n * row).view({n, row / d, d}).slice(1, 0, h);
  };
  const Tensor q = heads(0, p.hk, p.dk), k = heads(kq, p.hk, p.dk), v = heads(2 * kq, p.hv, p.dv);
  q.copy_(p.q);
  k.copy_(p.k);
  v.copy_(p.v);
  ASSERT_EQ(q.stride(0), row);
  for (GdrFn fn : {static_cast<GdrFn>(ops::chunk_gated_delta_rule), static_cast<GdrFn>(ops::recurrent_gated_delta_rule)}) {
    Tensor s1 = p.state.clone(), s2 = p.state.clone();
    Tensor o1 = Tensor::empty({n, p.hv, p.dv}, DType::kF32), o2 = Tensor::empty({n, p.hv, p.dv}, DType::kF32);
    fn(p.q, p.k, p.v, p.g, p.beta, s1, segments({30, 40}, {0, 1}, {1, 0}), p.params(), o1);
    fn(q, k, v, p.g, p.beta, s2, segments({30, 40}, {0, 1}, {1, 0}), p.params(), o2);
    EXPECT_TRUE(bitwise_equal(o1, o2));
    EXPECT_TRUE(bitwise_equal(s1, s2));
  }
}

TEST(GatedDeltaRule, BatchedCallEqualsOneCallPerRequest) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const std::vector<int32_t> lens{3, 70, 1, 130, 0, 64};
  const std::vector<int32_t> slots{5, 0, 7, 2, 6, 4};
  const std::vector<int32_t> init{1, 0, 1, 1, 0, 0};
  const int64_t n = std::accumulate(lens.begin(), lens.end(), 0);
  Gdr p(rng, n);
  for (GdrFn fn : {static_cast<GdrFn>(ops::chunk_gated_delta_rule), static_cast<GdrFn>(ops::recurrent_gated_delta_rule)}) {
    Tensor batched_state = p.state.clone();
    Tensor batched = Tensor::empty({n, p.hv, p.dv}, DType::kF32);
    fn(p.q, p.k, p.v, p.g, p.beta, batched_state, segments(lens, slots, init), p.params(), batched);
    Tensor single_state = p.state.clone();
    int64_t row = 0;
    for (size_t r = 0; r < lens.size(); ++r) {
      const int64_t end = row + lens[r];
      Tensor out = Tensor::empty({lens[r], p.hv, p.dv}, DType::kF32);
      fn(p.q.slice(0, row, end), p.k.slice(0, row, end), p.v.slice(0, row, end).contiguous(), p.g.slice(0, row, end),
         p.beta.slice(0, row, end), single_state, segments({lens[r]}, {slots[r]}, {init[r]}), p.params(), out);
      EXPECT_TRUE(bitwise_equal(out, batched.slice(0, row, end))) << "request " << r;
      row = end;
    }
    EXPECT_TRUE(bitwise_equal(single_state, batched_state));
    EXPECT_TRUE(bitwise_equal(batched_state.select(0, 6), p.state.select(0, 6))) << "empty segment wrote its slot";
  }
}

TEST(GatedDeltaRule, SnapshotEqualsStateOfThePrefix) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (GdrFn fn : {static_cast<GdrFn>(ops::chunk_gated_delta_rule), static_cast<GdrFn>(ops::recurrent_gated_delta_rule)}) {
    for (int32_t track : {1, 40, 64, 100, 150}) {
      SCOPED_TRACE("track_len " + std::to_string(track));
      const int32_t n = 150;
      Gdr p(rng, n);
      Tensor state = p.state.clone();
      Tensor out = Tensor::empty({n, p.hv, p.dv}, DType::kF32);
      fn(p.q, p.k, p.v, p.g, p.beta, state, segments({n}, {1}, {1}, {6}, {track}), p.params(), out);
      // Only the first `track` tokens, from the same initial state.
      Tensor prefix_state = p.state.clone();
      Tensor prefix_out = Tensor::empty({track, p.hv, p.dv}, DType::kF32);
      fn(p.q.slice(0, 0, track), p.k.slice(0, 0, track), p.v.slice(0, 0, track).contiguous(), p.g.slice(0, 0, track),
         p.beta.slice(0, 0, track), prefix_state, segments({track}, {1}, {1}), p.params(), prefix_out);
      EXPECT_TRUE(bitwise_equal(state.select(0, 6), prefix_state.select(0, 1)));
      EXPECT_TRUE(bitwise_equal(out.slice(0, 0, track), prefix_out));
      std::vector<double> s = slot_state(p.state, 1);
      const std::vector<double> want = reference_gdr(p, 0, n, s);
      EXPECT_LE(rel_l2(out, want), kTol);
      EXPECT_LE(rel_l2(slot_state(state, 1), s), kTol);
    }
  }
}

// Conv reference in double: in[] = state (K-1 columns) followed by the rows of x.
std::vector<double> reference_conv(const Tensor& x, const Tensor& w, const std::vector<double>& state0, bool silu,
                                   std::vector<double>& state) {
  const int64_t n = x.size(0), c = x.size(1), kernel = w.size(1), width = kernel - 1;
  std::vector<double> out(n * c);
  for (int64_t ch = 0; ch < c; ++ch) {
    std::vector<double> in(state0.begin() + ch * width, state0.begin() + (ch + 1) * width);
    for (int64_t t = 0; t < n; ++t) in.push_back(x.at<float>({t, ch}));
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (int64_t j = 0; j < kernel; ++j) s += w.at<float>({ch, j}) * in[t + j];
      out[t * c + ch] = silu ? s / (1 + std::exp(-s)) : s;
    }
    for (int64_t j = 0; j < width; ++j) state[ch * width + j] = in[in.size() - width + j];
  }
  return out;
}

TEST(CausalConv1d, PrefillEqualsTokenByTokenAndReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t c = 70, kernel = 4, n = 37, slots = 4;
  const Tensor x = testing::random_normal(rng, {n, c});
  const Tensor w = testing::random_normal(rng, {c, kernel}, 0.5f);
  const Tensor state0 = testing::random_normal(rng, {slots, c, kernel - 1});
  for (bool with_state : {false, true}) {
    Tensor state = state0.clone();
    Tensor out = Tensor::empty({n, c}, DType::kF32);
    ops::causal_conv1d(x, w, std::nullopt, state, segments({n}, {2}, {with_state ? 1 : 0}), true, out);
    std::vector<double> s(c * (kernel - 1));
    const std::vector<double> s0 = with_state ? slot_state(state0, 2) : std::vector<double>(s.size(), 0.0);
    EXPECT_LE(rel_l2(out, reference_conv(x, w, s0, true, s)), 1e-6);
    EXPECT_LE(rel_l2(slot_state(state, 2), s), 0.0);
    // Decode: one token per call, continuing from the state.
    Tensor step_state = state0.clone();
    for (int64_t t = 0; t < n; ++t) {
      Tensor o = Tensor::empty({1, c}, DType::kF32);
      ops::causal_conv1d(x.slice(0, t, t + 1), w, std::nullopt, step_state,
                         segments({1}, {2}, {(t > 0 || with_state) ? 1 : 0}), true, o);
      EXPECT_TRUE(bitwise_equal(o, out.slice(0, t, t + 1))) << "token " << t;
    }
    EXPECT_TRUE(bitwise_equal(step_state, state));
  }
}

TEST(CausalConv1d, InPlaceBiasBatchAndSnapshot) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t c = 33, kernel = 4;
  const std::vector<int32_t> lens{5, 1, 2, 9};
  const int64_t n = 17;
  const Tensor x = testing::random_normal(rng, {n, c});
  const Tensor w = testing::random_normal(rng, {c, kernel}, 0.5f);
  const Tensor bias = testing::random_normal(rng, {c});
  const Tensor state0 = testing::random_normal(rng, {8, c, kernel - 1});
  Tensor state = state0.clone();
  Tensor out = Tensor::empty({n, c}, DType::kF32);
  ops::causal_conv1d(x, w, bias, state, segments(lens, {3, 0, 5, 1}, {1, 0, 1, 0}, {-1, -1, 7, 6}, {0, 0, 1, 4}),
                     false, out);
  Tensor in_place = x.clone();
  Tensor state2 = state0.clone();
  ops::causal_conv1d(in_place, w, bias, state2, segments(lens, {3, 0, 5, 1}, {1, 0, 1, 0}), false, in_place);
  EXPECT_TRUE(bitwise_equal(in_place, out));
  int64_t row = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    const int32_t slot = std::vector<int32_t>{3, 0, 5, 1}[r];
    const bool init = r == 0 || r == 2;
    const Tensor xr = x.slice(0, row, row + lens[r]);
    std::vector<double> s(c * (kernel - 1));
    const std::vector<double> s0 = init ? slot_state(state0, slot) : std::vector<double>(s.size(), 0.0);
    std::vector<double> want = reference_conv(xr, w, s0, false, s);
    for (int64_t t = 0; t < lens[r]; ++t) {
      for (int64_t ch = 0; ch < c; ++ch) want[t * c + ch] += bias.at<float>({ch});
    }
    EXPECT_LE(rel_l2(out.slice(0, row, row + lens[r]), want), 1e-6) << "request " << r;
    EXPECT_LE(rel_l2(slot_state(state, slot), s), 0.0) << "request " << r;
    row += lens[r];
  }
  // Snapshots: request 2 after 1 token, request 3 after 4 tokens (a zero-started request).
  std::vector<double> s(c * (kernel - 1));
  reference_conv(x.slice(0, 6, 7), w, slot_state(state0, 5), false, s);
  EXPECT_LE(rel_l2(slot_state(state, 7), s), 0.0);
  reference_conv(x.slice(0, 8, 12), w, std::vector<double>(s.size(), 0.0), false, s);
  EXPECT_LE(rel_l2(slot_state(state, 6), s), 0.0);
}

TEST(GdnGates, GatingNormAndSigmoidMatchFormulas) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 9, hv = 6, d = 20;
  const Tensor ab = testing::random_normal(rng, {n, 2 * hv}, 10.0f);  // reaches softplus' linear branch
  const Tensor a = ab.slice(1, 0, hv), b = ab.slice(1, hv, 2 * hv);
  const Tensor a_log = testing::random_normal(rng, {hv}), dt_bias = testing::random_normal(rng, {hv});
  Tensor g = Tensor::empty({n, hv}, DType::kF32), beta = Tensor::empty({n, hv}, DType::kF32);
  ops::gdn_gating(a, b, a_log, dt_bias, g, beta);
  std::vector<double> want_g, want_beta;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < hv; ++h) {
      const double x = static_cast<double>(a.at<float>({t, h})) + dt_bias.at<float>({h});
      const double sp = x > 20 ? x : std::log1p(std::exp(x));
      want_g.push_back(-std::exp(static_cast<double>(a_log.at<float>({h}))) * sp);
      want_beta.push_back(1 / (1 + std::exp(-static_cast<double>(b.at<float>({t, h})))));
    }
  }
  EXPECT_LE(rel_l2(g, want_g), 1e-6);
  EXPECT_LE(rel_l2(beta, want_beta), 1e-6);

  const Tensor x = testing::random_normal(rng, {n, 3, d}), z = testing::random_normal(rng, {n, 3, d});
  const Tensor w = testing::random_normal(rng, {d});
  Tensor out = Tensor::empty({n, 3, d}, DType::kF32);
  ops::rms_norm_gated(x, z, w, 1e-6f, out);
  std::vector<double> want;
  for (int64_t i = 0; i < n * 3; ++i) {
    const float* xr = x.data<float>() + i * d;
    const float* zr = z.data<float>() + i * d;
    double ss = 0;
    for (int64_t k = 0; k < d; ++k) ss += static_cast<double>(xr[k]) * xr[k];
    const double inv = 1 / std::sqrt(ss / d + 1e-6);
    for (int64_t k = 0; k < d; ++k) want.push_back(w.at<float>({k}) * xr[k] * inv * zr[k] / (1 + std::exp(-zr[k])));
  }
  EXPECT_LE(rel_l2(out, want), 1e-6);

  Tensor sm = Tensor::empty({n, 3, d}, DType::kF32);
  ops::sigmoid_mul(x, z, sm);
  std::vector<double> want_sm;
  for (int64_t i = 0; i < x.numel(); ++i) {
    want_sm.push_back(x.data<float>()[i] / (1 + std::exp(-static_cast<double>(z.data<float>()[i]))));
  }
  EXPECT_LE(rel_l2(sm, want_sm), 1e-6);

  const Tensor x2 = x.view({n, 3 * d}), gate = testing::random_normal(rng, {n, 1});
  Tensor acc = z.clone().view({n, 3 * d});
  ops::sigmoid_gate_add(x2, gate, acc);
  std::vector<double> want_acc;
  for (int64_t i = 0; i < n; ++i) {
    const double s = 1 / (1 + std::exp(-static_cast<double>(gate.at<float>({i, 0}))));
    for (int64_t k = 0; k < 3 * d; ++k) want_acc.push_back(z.data<float>()[i * 3 * d + k] + s * x2.at<float>({i, k}));
  }
  EXPECT_LE(rel_l2(acc, want_acc), 1e-6);
}

TEST(Moe, TopkSoftmaxMatchesSortedSoftmax) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 12, experts = 8;
  Tensor logits = testing::random_normal(rng, {n, experts}, 2.0f);
  for (int64_t e = 0; e < experts; ++e) logits.at<float>({0, e}) = 0.5f;  // all tied: lowest ids win
  logits.at<float>({1, 5}) = logits.at<float>({1, 2}) = 9.0f;             // a tie at the top
  for (int64_t top_k : {1, 3, 8}) {
    for (bool renorm : {false, true}) {
      Tensor w = Tensor::empty({n, top_k}, DType::kF32);
      Tensor ids = Tensor::empty({n, top_k}, DType::kI32);
      ops::moe_topk_softmax(logits, renorm, w, ids);
      for (int64_t t = 0; t < n; ++t) {
        std::vector<double> p(experts);
        double mx = -1e30, sum = 0;
        for (int64_t e = 0; e < experts; ++e) mx = std::max(mx, static_cast<double>(logits.at<float>({t, e})));
        for (int64_t e = 0; e < experts; ++e) sum += p[e] = std::exp(logits.at<float>({t, e}) - mx);
        std::vector<int32_t> order(experts);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return p[x] > p[y]; });
        double sel = 0;
        for (int64_t j = 0; j < top_k; ++j) sel += p[order[j]] / sum;
        for (int64_t j = 0; j < top_k; ++j) {
          EXPECT_EQ(ids.at<int32_t>({t, j}), order[j]) << "token " << t << " rank " << j;
          const double want = p[order[j]] / sum / (renorm ? sel : 1.0);
          EXPECT_NEAR(w.at<float>({t, j}), want, 1e-6) << "token " << t << " rank " << j;
        }
      }
      EXPECT_EQ(ids.at<int32_t>({0, 0}), 0);
      EXPECT_EQ(ids.at<int32_t>({1, 0}), 2);
    }
  }
}

TEST(Moe, ExpertsMatchPlainLoop) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 11, hidden = 24, inter = 10, experts = 6, top_k = 2;
  const Tensor x = testing::random_normal(rng, {n, hidden});
  const Tensor w_gate_up = testing::random_normal(rng, {experts, 2 * inter, hidden}, 0.3f);
  const Tensor w_down = testing::random_normal(rng, {experts, hidden, inter}, 0.3f);
  Tensor w = Tensor::empty({n, top_k}, DType::kF32), ids = Tensor::empty({n, top_k}, DType::kI32);
  ops::moe_topk_softmax(testing::random_normal(rng, {n, experts}), true, w, ids);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor gu = w_gate_up.to(dt), dn = w_down.to(dt);
    Tensor out = Tensor::empty({n, hidden}, DType::kF32);
    testing::poison(out);
    ops::moe_experts(x, gu, dn, w, ids, out);
    std::vector<double> want(n * hidden, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t e = ids.at<int32_t>({t, j});
        std::vector<double> act(inter);
        for (int64_t i = 0; i < inter; ++i) {
          double gsum = 0, usum = 0;
          for (int64_t h = 0; h < hidden; ++h) {
            gsum += testing::element(gu, (e * 2 * inter + i) * hidden + h) * x.at<float>({t, h});
            usum += testing::element(gu, (e * 2 * inter + inter + i) * hidden + h) * x.at<float>({t, h});
          }
          act[i] = gsum / (1 + std::exp(-gsum)) * usum;
        }
        for (int64_t h = 0; h < hidden; ++h) {
          double y = 0;
          for (int64_t i = 0; i < inter; ++i) y += testing::element(dn, (e * hidden + h) * inter + i) * act[i];
          want[t * hidden + h] += w.at<float>({t, j}) * y;
        }
      }
    }
    EXPECT_LE(rel_l2(out, want), 1e-5) << dtype_name(dt);
  }
}

// GGUF experts kept in their block types (each projection its own, as Q4_K_M files store them):
// with f32 activations exactly the float path on the dequantized weights (double reference, as
// above); with 8-bit activations (the default) within 3e-2 relative L2: x and the SiLU product are
// each rounded to 8-bit blocks (about 0.6% of a value's rms each on these Gaussian rows; measured
// 0.9-1.9%, printed), where a wrong expert slice or scale would be off by order 1.
TEST(Moe, QuantizedExpertsMatchDequantizedReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 9, experts = 4, top_k = 2;
  struct Case {
    DType gate_up, down;
    int64_t hidden, inter;
  };
  for (const Case& k : {Case{DType::kQ8_0, DType::kQ8_0, 64, 32}, Case{DType::kQ4_K, DType::kQ6_K, 256, 256},
                        Case{DType::kQ4_K, DType::kF32, 256, 128}}) {
    SCOPED_TRACE(str(dtype_name(k.gate_up), " / ", dtype_name(k.down)));
    auto experts_of = [&](DType dt, int64_t rows, int64_t cols) {
      if (!is_quantized(dt)) return testing::random_normal(rng, {experts, rows, cols}, 0.1f);
      Tensor t = Tensor::empty({experts, rows, cols}, dt);
      fill_random_blocks(dt, t.data_ptr(), experts * rows * cols / dtype_block_size(dt), rng.gen()(), 0.1f);
      return t;
    };
    const Tensor gu = experts_of(k.gate_up, 2 * k.inter, k.hidden),
                 dn = experts_of(k.down, k.hidden, k.inter);
    const Tensor gu_f = dequantize(gu), dn_f = dequantize(dn);
    const Tensor x = testing::random_normal(rng, {n, k.hidden});
    Tensor w = Tensor::empty({n, top_k}, DType::kF32), ids = Tensor::empty({n, top_k}, DType::kI32);
    ops::moe_topk_softmax(testing::random_normal(rng, {n, experts}), true, w, ids);
    std::vector<double> want(n * k.hidden, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t e = ids.at<int32_t>({t, j});
        std::vector<double> act(k.inter);
        for (int64_t i = 0; i < k.inter; ++i) {
          double g = 0, u = 0;
          for (int64_t h = 0; h < k.hidden; ++h) {
            g += gu_f.at<float>({e, i, h}) * static_cast<double>(x.at<float>({t, h}));
            u += gu_f.at<float>({e, k.inter + i, h}) * static_cast<double>(x.at<float>({t, h}));
          }
          act[i] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t h = 0; h < k.hidden; ++h) {
          double y = 0;
          for (int64_t i = 0; i < k.inter; ++i) y += dn_f.at<float>({e, h, i}) * act[i];
          want[t * k.hidden + h] += w.at<float>({t, j}) * y;
        }
      }
    }
    Tensor ref = Tensor::empty({n, k.hidden}, DType::kF32), out = Tensor::empty({n, k.hidden}, DType::kF32);
    ops::set_quantized_linear_activations(ops::QuantizedActivations::kF32);
    ops::moe_experts(x, gu, dn, w, ids, ref);
    ops::set_quantized_linear_activations(ops::QuantizedActivations::kInt8);
    EXPECT_LE(rel_l2(ref, want), 1e-5);
    testing::poison(out);
    ops::moe_experts(x, gu, dn, w, ids, out);
    const double err = rel_l2(out, want);
    std::cout << dtype_name(k.gate_up) << " / " << dtype_name(k.down)
              << " experts, 8-bit activations: rel L2 " << err << "\n";
    EXPECT_LE(err, 3e-2);
  }
}

// FP8 experts of one layer: e4m3 codes [experts, rows, cols] (random, |w| up to the 448 maximum)
// with random scales per expert and output channel ([experts, rows]) or per block_n x block_k
// block ([experts, row blocks, col blocks]), and the dequantized f32 experts (code * scale).
struct Fp8Experts {
  Tensor w;            // f8e4m3 [experts, rows, cols]
  ops::Fp8Scales s;    // stacked scales
  Tensor dequantized;  // f32 [experts, rows, cols]
};

Fp8Experts random_fp8_experts(TestRng& rng, int64_t experts, int64_t rows, int64_t cols, int64_t block) {
  Fp8Experts f;
  f.w = Tensor::empty({experts, rows, cols}, DType::kF8E4M3);
  f.w.copy_(testing::random_normal(rng, {experts, rows, cols}, 60.0f));
  const int64_t rb = block > 0 ? (rows + block - 1) / block : rows,
                cb = block > 0 ? (cols + block - 1) / block : 1;
  f.s.block_n = f.s.block_k = block;
  f.s.weight_scale = Tensor::empty(block > 0 ? Shape{experts, rb, cb} : Shape{experts, rows}, DType::kF32);
  for (int64_t i = 0; i < f.s.weight_scale.numel(); ++i) {
    f.s.weight_scale.data<float>()[i] = static_cast<float>(rng.uniform(1e-3, 4e-3));
  }
  f.dequantized = f.w.to(DType::kF32).contiguous();
  float* d = f.dequantized.data<float>();
  const float* sc = f.s.weight_scale.data<float>();
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        d[(e * rows + r) * cols + c] *=
            block > 0 ? sc[(e * rb + r / block) * cb + c / block] : sc[e * rows + r];
      }
    }
  }
  return f;
}

// FP8 experts (ops::moe_experts with MoeFp8Scales) on the CPU, per output channel and in blocks
// (128 x 128 with whole blocks, 64 x 64 with partial ones in hidden = 200):
//  - f32 activations (set_fp8_linear_activations(kF32), the checkpoint tests' exact mode) against
//    the float path on the dequantized experts: 1e-5 rel. L2 (the same f32 products and sums);
//  - FP8 activations (the default) against the per-token composition of the FP8 linear itself
//    (ops::linear with expert e's scale slice, silu_and_mul, the routing weights in expert id
//    order): 1e-6 — the same arithmetic per row, so a wrong expert slice, scale slice or block
//    grid shows as an order-1 error;
//  - FP8 activations against the dequantized float experts: 8e-2 rel. L2. x and the SiLU product
//    are each rounded to e4m3 (3 mantissa bits: a rounding error up to 2^-4 of a value, about 2.5%
//    rms on Gaussian rows), which reaches the output through two chained projections (measured
//    3.2-5.0% over 30 runs of the three cases; printed).
TEST(Moe, Fp8ExpertsMatchDequantizedReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 13, experts = 6, top_k = 2;
  struct Case {
    int64_t hidden, inter, block;
  };
  for (const Case& k : {Case{72, 40, 0}, Case{256, 128, 128}, Case{200, 64, 64}}) {
    SCOPED_TRACE(str("hidden ", k.hidden, " inter ", k.inter, " block ", k.block));
    const Fp8Experts gu = random_fp8_experts(rng, experts, 2 * k.inter, k.hidden, k.block);
    const Fp8Experts dn = random_fp8_experts(rng, experts, k.hidden, k.inter, k.block);
    const ops::MoeFp8Scales scales{gu.s, dn.s};
    const Tensor x = testing::random_normal(rng, {n, k.hidden});
    Tensor w = Tensor::empty({n, top_k}, DType::kF32), ids = Tensor::empty({n, top_k}, DType::kI32);
    ops::moe_topk_softmax(testing::random_normal(rng, {n, experts}), true, w, ids);
    Tensor ref = Tensor::empty({n, k.hidden}, DType::kF32);
    ops::moe_experts(x, gu.dequantized, dn.dequantized, w, ids, ref);
    const std::vector<double> want(ref.data<float>(), ref.data<float>() + ref.numel());

    Tensor exact = Tensor::empty({n, k.hidden}, DType::kF32), out = Tensor::empty({n, k.hidden}, DType::kF32);
    testing::poison(exact);
    testing::poison(out);
    ops::set_fp8_linear_activations(ops::Fp8Activations::kF32);
    ops::moe_experts(x, gu.w, dn.w, w, ids, exact, scales);
    ops::set_fp8_linear_activations(ops::Fp8Activations::kFp8);
    ops::moe_experts(x, gu.w, dn.w, w, ids, out, scales);
    EXPECT_LE(rel_l2(exact, want), 1e-5) << "f32 activations";

    std::vector<double> composed(n * k.hidden, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<std::pair<int32_t, float>> routes;
      for (int64_t j = 0; j < top_k; ++j) routes.emplace_back(ids.at<int32_t>({t, j}), w.at<float>({t, j}));
      std::sort(routes.begin(), routes.end());
      for (const auto& [e, weight] : routes) {
        Tensor g = Tensor::empty({1, 2 * k.inter}, DType::kF32), a = Tensor::empty({1, k.inter}, DType::kF32);
        Tensor y = Tensor::empty({1, k.hidden}, DType::kF32);
        ops::linear(x.slice(0, t, t + 1), gu.w.select(0, e), std::nullopt, g,
                    ops::expert_fp8_scales(gu.s, e));
        ops::silu_and_mul(g, a);
        ops::linear(a, dn.w.select(0, e), std::nullopt, y, ops::expert_fp8_scales(dn.s, e));
        for (int64_t h = 0; h < k.hidden; ++h) {
          composed[t * k.hidden + h] =
              static_cast<float>(composed[t * k.hidden + h] + y.at<float>({0, h}) * weight);
        }
      }
    }
    EXPECT_LE(rel_l2(out, composed), 1e-6) << "FP8 activations vs the per-token FP8 linears";
    const double err = rel_l2(out, want);
    std::cout << "FP8 experts (block " << k.block << "), e4m3 activations vs dequantized f32 experts: rel L2 "
              << err << "\n";
    EXPECT_LE(err, 8e-2);
  }
}

TEST(Moe, Fp8ExpertsBadScalesAreErrors) {
  TestRng rng;
  const int64_t n = 3, hidden = 64, inter = 48, experts = 4;
  const Fp8Experts gu = random_fp8_experts(rng, experts, 2 * inter, hidden, 32);
  const Fp8Experts dn = random_fp8_experts(rng, experts, hidden, inter, 32);
  const Tensor x = testing::random_normal(rng, {n, hidden});
  Tensor w = Tensor::empty({n, 2}, DType::kF32), ids = Tensor::empty({n, 2}, DType::kI32);
  ops::moe_topk_softmax(testing::random_normal(rng, {n, experts}), true, w, ids);
  Tensor out = Tensor::empty({n, hidden}, DType::kF32);
  auto run = [&](const Tensor& g, const Tensor& d, const ops::MoeFp8Scales& s) {
    return error_of([&] { ops::moe_experts(x, g, d, w, ids, out, s); });
  };
  // inter = 48 is not a whole number of 32-row blocks: gate's last block would hold up rows.
  EXPECT_NE(run(gu.w, dn.w, {gu.s, dn.s}).find("inter = 48 is not a multiple of block_n = 32"),
            std::string::npos)
      << run(gu.w, dn.w, {gu.s, dn.s});
  EXPECT_NE(run(gu.w, dn.w, {}).find("pass its scales"), std::string::npos) << run(gu.w, dn.w, {});
  ops::Fp8Scales per_channel;
  per_channel.weight_scale = Tensor::empty({experts, hidden}, DType::kF32);
  EXPECT_NE(run(gu.w, dn.w, {per_channel, dn.s}).find("must have shape [4, 96]"), std::string::npos)
      << run(gu.w, dn.w, {per_channel, dn.s});
  EXPECT_NE(run(gu.dequantized, dn.dequantized, {gu.s, dn.s}).find("not f8e4m3"), std::string::npos)
      << run(gu.dequantized, dn.dequantized, {gu.s, dn.s});
  EXPECT_NE(run(gu.w, dn.dequantized, {gu.s, dn.s}).find("w_down"), std::string::npos);
}

TEST(LinearAttentionOps, BadInputsAreErrors) {
  TestRng rng;
  Gdr p(rng, 10);
  Tensor out = Tensor::empty({10, p.hv, p.dv}, DType::kF32);
  auto run = [&](const ops::StateSegments& s) {
    return error_of([&] { ops::chunk_gated_delta_rule(p.q, p.k, p.v, p.g, p.beta, p.state, s, p.params(), out); });
  };
  EXPECT_NE(run(segments({10}, {8}, {0})).find("outside the state pool"), std::string::npos);
  EXPECT_NE(run(segments({4, 6}, {1, 1}, {0, 0})).find("used twice"), std::string::npos);
  EXPECT_NE(run(segments({4, 5}, {1, 2}, {0, 0})).find("must equal num_tokens"), std::string::npos);
  EXPECT_NE(run(segments({4, 6}, {1, 2}, {0, 0}, {3, 2}, {2, 2})).find("used twice"), std::string::npos);
  EXPECT_NE(run(segments({4, 6}, {1, 2}, {0, 0}, {3, -1}, {5, 0})).find("track length 5"), std::string::npos);
  EXPECT_NE(run(segments({4, 6}, {1, 2}, {0})).find("has_initial_state"), std::string::npos);
  Tensor v3 = testing::random_normal(rng, {10, 3, p.dv});
  EXPECT_NE(error_of([&] {
              ops::recurrent_gated_delta_rule(p.q, p.k, v3, p.g, p.beta, p.state, segments({10}, {0}, {0}),
                                              p.params(), out);
            }).find("multiple of num_k_heads"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::recurrent_gated_delta_rule(p.q, p.k, p.v, p.g, p.beta, p.state, segments({10}, {0}, {0}),
                                              p.params(), p.v);
            }).find("overlaps"),
            std::string::npos);
  const Tensor x = testing::random_normal(rng, {10, 8});
  Tensor conv_state = Tensor::zeros({2, 8, 3}, DType::kF32);
  EXPECT_NE(error_of([&] {
              ops::causal_conv1d(x, testing::random_normal(rng, {8, 3}), std::nullopt, conv_state,
                                 segments({10}, {0}, {0}), true, Tensor::empty({10, 8}, DType::kF32));
            }).find("kernel_size - 1"),
            std::string::npos);
  const Tensor rows = testing::random_normal(rng, {11, 8});
  EXPECT_NE(error_of([&] {
              ops::causal_conv1d(rows.slice(0, 0, 10), testing::random_normal(rng, {8, 4}), std::nullopt, conv_state,
                                 segments({10}, {0}, {0}), true, rows.slice(0, 1, 11));
            }).find("overlaps x without being x"),
            std::string::npos);
  Tensor w = Tensor::empty({2, 2}, DType::kF32), ids = Tensor::empty({2, 2}, DType::kI32);
  EXPECT_NE(error_of([&] { ops::moe_topk_softmax(testing::random_normal(rng, {2, 1}), true, w, ids); }).find("top_k"),
            std::string::npos);
  ids = i32({0, 1, 0, 5}).view({2, 2});
  auto experts = [&] {
    return error_of([&] {
      ops::moe_experts(testing::random_normal(rng, {2, 4}), testing::random_normal(rng, {3, 6, 4}),
                       testing::random_normal(rng, {3, 4, 3}), w, ids, Tensor::empty({2, 4}, DType::kF32));
    });
  };
  EXPECT_NE(experts().find("outside [0, num_experts = 3)"), std::string::npos);
  ids = i32({0, 1, 2, 2}).view({2, 2});
  EXPECT_NE(experts().find("lists expert 2 twice"), std::string::npos);
}

}  // namespace
}  // namespace rlm
