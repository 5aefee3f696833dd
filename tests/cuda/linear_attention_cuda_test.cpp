// CUDA twins of the Gated DeltaNet and MoE ops (ops/linear_attention_ops.h, ops/moe_ops.h), each
// against its CPU twin on fresh random inputs (seed in every failure message): several requests of
// 1, 63, 64, 65 and 200 new tokens (and an empty one), with and without initial state, snapshots,
// grouped value heads, strided head views, bf16/f16 weights and poisoned outputs. Whole state pools
// are compared, so a slot outside the batch that changes shows.
// Tolerances (rel. L2 over all compared elements):
//   elementwise ops, conv: 1e-5 (expf/log1pf of the two libraries and fma contraction);
//   recurrent gated delta rule: 1e-5 (same recurrence, other summation order);
//   chunk_gated_delta_rule: by default the GPU runs the token recurrence, the CPU the chunked WY
//     form, which agree to fp32 rounding (each is within 2e-5 of a double reference in the CPU
//     tests): 5e-5; with RADIXLM_GDN_CHUNKED=1 (ChunkedKernel* tests) the GPU runs the chunked
//     WY form too (lengths 1..300, snapshots at chunk-aligned and unaligned positions): 5e-5
//     (expected ~1e-5);
//   moe_experts: f32 weights 1e-5 (cuBLAS SGEMM without TF32); bf16 weights 1e-2 (the GPU rounds
//     activations to bf16 before each GEMM, cf. kernels/cuda/linear.h);
//   moe_experts with GGUF block-quantized experts (Q4_K gate/up + Q6_K down, Q8_0 both, f32 gate/up +
//     Q6_K down; hidden 512, inter 256, weights within +-0.1, x ~ N(0, 1)), n = 1, 5, 37, 300 tokens,
//     16 experts, top 4. Each expert's projection is cuda::quant_linear on its rows: the 8-bit GEMV
//     for an expert given <= 8 rows, else bf16-dequantized blocks + cuBLAS. Against the CPU's
//     f32-activation reference mode (ops::set_quantized_linear_activations(kF32): exact on the
//     dequantized weights, within 1e-5 of a double loop in tests/unit): 3e-2, as the CPU's own 8-bit
//     test allows (GEMV experts round x and the SiLU product to 8-bit 32-value blocks, each value
//     off by up to half a step of max|block| / 127, about 1% rel. L2 in all); 1e-2 when every used
//     expert has > 8 rows (x and the dequantized weight rounded to bf16, as the bf16 experts above).
//     A CPU emulation of both GPU paths measured at most 1.4% (n = 1) and 0.42% (n = 300, all GEMM)
//     over 30 seeds per case; a wrong expert slice, row size or type would be off by order 1.
//     Against the CPU's default 8-bit path, where the GPU's GEMV computes the very same activation
//     bits (32-value-block types such as Q8_0; the CPU takes 256-value blocks for K-quants, ~2% apart)
//     and n <= 8 (every expert a GEMV): 2e-3 — the products are exact integers and only f32 summation
//     order differs (emulated: 4e-7), but that can move a SiLU product across an 8-bit rounding
//     boundary, one step of one value, when it happens (emulated, 30 seeds: once, 9e-5).
//   moe_experts with FP8 experts (f8e4m3 codes with scales per expert and output channel, or per
//     128 x 128 block; hidden 256, inter 128, 16 experts, top 4, n = 1, 5, 37, 300 tokens) against
//     the CPU's FP8 path (ops::moe_experts with MoeFp8Scales, e4m3 activations): 2e-2. Each expert
//     runs cuda::fp8_linear, whose activation codes are bit-exact with the CPU's and whose products
//     are exact; the sums differ in order (FMA kernel, CUDA-core GEMV: ~1e-6) or keep fewer bits
//     on the FP8 tensor cores (gemv_mma for experts given <= 8 rows, cuBLASLt for per-channel
//     experts above: ~1.3e-4 rel. L2 per projection, fp8_cuda_test's kTolTensorCore 5e-4). Unlike
//     one linear, the MoE quantizes the SiLU product again for the down projection: a 1.3e-4
//     perturbation moves about 2 * 1.3e-4 / (1 / 11) ~ 0.3% of the products across an e4m3
//     rounding midpoint (one step, ~9% of the value), which is sqrt(3e-3) * 0.09 ~ 5e-3 rel. L2 at
//     the output; 2e-2 leaves 4x margin, while a wrong expert slice, scale slice or block grid is
//     off by order 1 (the CPU test pins the CPU path to the per-token FP8 linears at 1e-6, and its
//     FP8 error against dequantized f32 experts is 4-5%).
//   moe_topk_softmax: ids identical, weights within 1e-6 absolute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "formats/gguf_dequant.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cuda/quant_matmul.h"
#include "ops/linear_attention_ops.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::compare_poisoned;
using testing::error_of;
using testing::gpu;
using testing::poisoned;
using testing::random_dtype;
using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

constexpr double kF32Tol = 1e-5;
constexpr double kChunkTol = 5e-5;
constexpr double kBf16Tol = 1e-2;
constexpr double kQuantTol = 3e-2;      // quantized experts vs the CPU's f32-activation reference
constexpr double kQuantGemmTol = 1e-2;  // the same, every used expert on the bf16 GEMM (> 8 rows)
constexpr double kQuantGemvTol = 2e-3;  // 32-value-block experts, <= 8 tokens, vs the CPU's 8-bit path
constexpr double kFp8MoeTol = 2e-2;     // FP8 experts vs the CPU's FP8 path (header)

Tensor i32(const std::vector<int32_t>& v) { return Tensor::from_vector(v); }

Tensor uniform(TestRng& rng, Shape shape, double lo, double hi) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.uniform(lo, hi));
  return t;
}

// A batch of requests: their new-token counts, state slots (a permutation of part of the pool),
// initial-state flags and snapshots (track slot, tokens before it), as CPU tensors.
struct Batch {
  std::vector<int32_t> lens, slots, has_init, track_slots, track_lens;
  int64_t num_tokens = 0;
  ops::StateSegments segments(Device device) const {
    std::vector<int32_t> indptr{0};
    for (int32_t l : lens) indptr.push_back(indptr.back() + l);
    ops::StateSegments s;
    s.qo_indptr = i32(indptr).to(device);
    s.state_slots = i32(slots).to(device);
    s.has_initial_state = i32(has_init).to(device);
    if (!track_slots.empty()) {
      s.track_slots = i32(track_slots).to(device);
      s.track_lens = i32(track_lens).to(device);
    }
    return s;
  }
};

// Requests of 1, 63, 64, 65, 200 and 0 tokens in a pool of 16 slots; slots 12..15 are never named.
Batch make_batch(TestRng& rng, bool track) {
  Batch b;
  b.lens = {1, 63, 64, 0, 65, 200};
  b.slots = {7, 2, 9, 4, 0, 5};
  b.has_init = {1, 0, 1, 1, 0, 1};
  if (track) {
    b.track_slots = {-1, 3, 10, -1, 11, 1};
    b.track_lens = {0, static_cast<int32_t>(rng.randint(1, 63)), 64, 0, 1, static_cast<int32_t>(rng.randint(65, 200))};
  }
  b.num_tokens = std::accumulate(b.lens.begin(), b.lens.end(), int64_t{0});
  return b;
}
constexpr int64_t kSlots = 16;

std::vector<int32_t> ints(const Tensor& t) {
  const Tensor c = to_cpu(t).contiguous();
  return std::vector<int32_t>(c.data<int32_t>(), c.data<int32_t>() + c.numel());
}

std::string compare(const Tensor& got_gpu, const Tensor& want_cpu, double tol) {
  return compare_poisoned(to_cpu(got_gpu), want_cpu, tol);
}

TEST(LinearAttentionCuda, CausalConv1dMatchesCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t conv_dim = 300;  // three channel blocks, the last partial
  for (int64_t kernel : {4, 2, 1}) {
    for (DType wd : {DType::kF32, DType::kBF16}) {
      for (bool track : {false, true}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(str("kernel ", kernel, " ", dtype_name(wd), " track ", track, " in_place ", in_place));
          const Batch b = make_batch(rng, track);
          const int64_t n = b.num_tokens;
          // x is a strided view (row stride conv_dim + 5), like a slice of a projection.
          const Tensor x_base = random_normal(rng, {n, conv_dim + 5});
          const Tensor weight = random_dtype(rng, {conv_dim, kernel}, wd, 0.5f);
          const Tensor bias = random_dtype(rng, {conv_dim}, wd, 0.5f);
          const Tensor state = random_normal(rng, {kSlots, conv_dim, kernel - 1});
          const bool silu = !in_place;
          const std::optional<Tensor> cbias = track ? std::optional<Tensor>(bias) : std::nullopt;
          const std::optional<Tensor> gbias = track ? std::optional<Tensor>(to_gpu(bias)) : std::nullopt;
          Tensor cx = x_base.clone(), gx = to_gpu(x_base);
          Tensor cstate = state.clone(), gstate = to_gpu(state);
          Tensor cout = in_place ? cx : poisoned({n, conv_dim}, DType::kF32);
          Tensor gout = in_place ? gx : to_gpu(cout);
          const Tensor cxv = cx.slice(1, 0, conv_dim), gxv = gx.slice(1, 0, conv_dim);
          ops::causal_conv1d(cxv, weight, cbias, cstate, b.segments(Device::cpu()), silu,
                             in_place ? cxv : cout);
          ops::causal_conv1d(gxv, to_gpu(weight), gbias, gstate, b.segments(gpu()), silu,
                             in_place ? gxv : gout);
          EXPECT_EQ(compare(gout, cout, kF32Tol), "");
          EXPECT_EQ(compare(gstate, cstate, kF32Tol), "");
        }
      }
    }
  }
}

// q, k, v as strided per-head views (token stride != heads * dim), as the GDN backend passes
// them: heads [1, 1 + h) of bases [n, h + 2, d].
struct GdrInputs {
  Tensor q, k, v, g, beta;
};

struct GdrBases {
  Tensor q, k, v, g, beta;  // [n, hk + 2, dk], [n, hk + 2, dk], [n, hv + 2, dv], [n, hv], [n, hv]
};

GdrBases gdr_bases(TestRng& rng, int64_t n, int64_t hk, int64_t hv, int64_t dk, int64_t dv, float scale) {
  GdrBases b;
  b.q = random_normal(rng, {n, hk + 2, dk}, scale);
  b.k = random_normal(rng, {n, hk + 2, dk}, scale);
  b.v = random_normal(rng, {n, hv + 2, dv});
  b.g = uniform(rng, {n, hv}, -0.6, -0.01);
  b.beta = uniform(rng, {n, hv}, 0.05, 0.95);
  return b;
}

GdrInputs gdr_views(const GdrBases& b, Device device) {
  GdrInputs in;
  const int64_t hk = b.q.size(1) - 2, hv = b.v.size(1) - 2;
  in.q = b.q.to(device).slice(1, 1, 1 + hk);
  in.k = b.k.to(device).slice(1, 1, 1 + hk);
  in.v = b.v.to(device).slice(1, 1, 1 + hv);
  in.g = b.g.to(device);
  in.beta = b.beta.to(device);
  return in;
}

TEST(LinearAttentionCuda, GatedDeltaRuleMatchesCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  struct Dims {
    int64_t hk, hv, dk, dv;
  };
  // The Qwen3-Next-80B head dims (grouped 2 value heads per key head), then odd small ones.
  for (const Dims& d : {Dims{2, 4, 128, 128}, Dims{3, 3, 37, 20}, Dims{1, 3, 128, 9}}) {
    for (bool chunked : {false, true}) {
      for (bool track : {false, true}) {
        for (bool l2norm : {true, false}) {
          SCOPED_TRACE(str("hk ", d.hk, " hv ", d.hv, " dk ", d.dk, " dv ", d.dv, " chunked ", chunked, " track ",
                           track, " l2norm ", l2norm));
          const Batch b = make_batch(rng, track);
          const int64_t n = b.num_tokens;
          const GdrBases bases = gdr_bases(rng, n, d.hk, d.hv, d.dk, d.dv, l2norm ? 1.0f : 0.15f);
          const Tensor state = random_normal(rng, {kSlots, d.hv, d.dk, d.dv}, 0.5f);
          const GdrInputs c = gdr_views(bases, Device::cpu());
          const GdrInputs gg = gdr_views(bases, gpu());
          Tensor cstate = state.clone(), gstate = to_gpu(state);
          Tensor cout = poisoned({n, d.hv, d.dv}, DType::kF32), gout = to_gpu(cout);
          ops::GatedDeltaRuleParams p;
          p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.dk)));
          p.use_qk_l2norm = l2norm;
          auto run = chunked ? ops::chunk_gated_delta_rule : ops::recurrent_gated_delta_rule;
          run(c.q, c.k, c.v, c.g, c.beta, cstate, b.segments(Device::cpu()), p, cout);
          run(gg.q, gg.k, gg.v, gg.g, gg.beta, gstate, b.segments(gpu()), p, gout);
          const double tol = chunked ? kChunkTol : kF32Tol;
          EXPECT_EQ(compare(gout, cout, tol), "");
          EXPECT_EQ(compare(gstate, cstate, tol), "");
        }
      }
    }
  }
}

// Sets RADIXLM_GDN_CHUNKED for one scope (ops::chunk_gated_delta_rule reads it at every call).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// Requests for the chunked kernel (every call has >= 64 tokens, so RADIXLM_GDN_CHUNKED=1 selects
// it): lengths 1, 63, 64, 0, 65, 130, 200, 300 in a pool of 24 slots, or one request of 64 / 65 /
// 130. track: 0 none, 1 snapshots at chunk boundaries (64, 128, 256, and whole requests), 2 at
// unaligned positions.
Batch make_chunk_batch(TestRng& rng, int which, int track) {
  Batch b;
  if (which == 0) {
    b.lens = {1, 63, 64, 0, 65, 130, 200, 300};
    b.slots = {7, 2, 9, 4, 0, 5, 13, 22};
    b.has_init = {1, 0, 1, 1, 0, 1, 0, 1};
  } else {
    b.lens = {which == 1 ? 64 : which == 2 ? 65 : 130};
    b.slots = {3};
    b.has_init = {which == 2 ? 0 : 1};
  }
  const auto pick = [&](int32_t len) -> int32_t {
    if (track == 1) return len >= 64 ? std::min<int32_t>(len, 64 * static_cast<int32_t>(rng.randint(1, len / 64))) : len;
    if (len < 2) return len;
    int32_t t = static_cast<int32_t>(rng.randint(1, len - 1));
    if (t % 64 == 0) t -= 1;
    return t;
  };
  if (track != 0) {
    for (size_t r = 0; r < b.lens.size(); ++r) {
      const bool none = b.lens[r] == 0 || (which == 0 && r == 2 && track == 2);
      b.track_slots.push_back(none ? -1 : static_cast<int32_t>(21 - r));
      b.track_lens.push_back(none ? 0 : pick(b.lens[r]));
    }
  }
  b.num_tokens = std::accumulate(b.lens.begin(), b.lens.end(), int64_t{0});
  return b;
}

// The chunked CUDA kernel (RADIXLM_GDN_CHUNKED=1) against the CPU chunked kernel. Both run the
// chunked WY form in f32, in other summation orders: rel. L2 expected ~1e-5, bound kChunkTol.
TEST(LinearAttentionCuda, ChunkedKernelMatchesCpuChunked) {
  RLM_REQUIRE_CUDA();
  const ScopedEnv env("RADIXLM_GDN_CHUNKED", "1");
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  struct Dims {
    int64_t hk, hv, dk, dv;
  };
  constexpr int64_t kChunkSlots = 24;
  for (const Dims& d : {Dims{2, 4, 128, 128}, Dims{3, 3, 37, 20}, Dims{1, 3, 128, 9}, Dims{2, 2, 12, 16},
                        Dims{1, 2, 16, 8}, Dims{2, 6, 8, 12}}) {
    for (int which = 0; which < 4; ++which) {
      for (int track = 0; track < 3; ++track) {
        for (bool l2norm : {true, false}) {
          const int64_t chunk_size = which == 0 && !l2norm && track == 2 ? 16 : 64;
          SCOPED_TRACE(str("hk ", d.hk, " hv ", d.hv, " dk ", d.dk, " dv ", d.dv, " batch ", which, " track ", track,
                           " l2norm ", l2norm, " chunk_size ", chunk_size));
          const Batch b = make_chunk_batch(rng, which, track);
          const int64_t n = b.num_tokens;
          const GdrBases bases = gdr_bases(rng, n, d.hk, d.hv, d.dk, d.dv, l2norm ? 1.0f : 0.15f);
          const Tensor state = random_normal(rng, {kChunkSlots, d.hv, d.dk, d.dv}, 0.5f);
          const GdrInputs c = gdr_views(bases, Device::cpu());
          const GdrInputs gg = gdr_views(bases, gpu());
          Tensor cstate = state.clone(), gstate = to_gpu(state);
          Tensor cout = poisoned({n, d.hv, d.dv}, DType::kF32), gout = to_gpu(cout);
          ops::GatedDeltaRuleParams p;
          p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d.dk)));
          p.use_qk_l2norm = l2norm;
          p.chunk_size = chunk_size;
          ops::chunk_gated_delta_rule(c.q, c.k, c.v, c.g, c.beta, cstate, b.segments(Device::cpu()), p, cout);
          ops::chunk_gated_delta_rule(gg.q, gg.k, gg.v, gg.g, gg.beta, gstate, b.segments(gpu()), p, gout);
          EXPECT_EQ(compare(gout, cout, kChunkTol), "");
          EXPECT_EQ(compare(gstate, cstate, kChunkTol), "");
        }
      }
    }
  }
}

// With RADIXLM_GDN_CHUNKED=1, a call of fewer than 64 tokens (here a decode batch of 1-token
// requests through the chunked op) keeps the token kernel and still matches the CPU.
TEST(LinearAttentionCuda, ChunkedOpShortCallsMatchCpu) {
  RLM_REQUIRE_CUDA();
  const ScopedEnv env("RADIXLM_GDN_CHUNKED", "1");
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  Batch b;
  b.lens = {1, 1, 7, 0, 30};
  b.slots = {1, 6, 3, 0, 2};
  b.has_init = {1, 0, 1, 1, 1};
  b.num_tokens = 39;
  const int64_t hk = 2, hv = 4, dk = 128, dv = 128;
  const GdrBases bases = gdr_bases(rng, b.num_tokens, hk, hv, dk, dv, 1.0f);
  const Tensor state = random_normal(rng, {8, hv, dk, dv}, 0.5f);
  const GdrInputs c = gdr_views(bases, Device::cpu());
  const GdrInputs gg = gdr_views(bases, gpu());
  Tensor cstate = state.clone(), gstate = to_gpu(state);
  Tensor cout = poisoned({b.num_tokens, hv, dv}, DType::kF32), gout = to_gpu(cout);
  ops::GatedDeltaRuleParams p;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  ops::chunk_gated_delta_rule(c.q, c.k, c.v, c.g, c.beta, cstate, b.segments(Device::cpu()), p, cout);
  ops::chunk_gated_delta_rule(gg.q, gg.k, gg.v, gg.g, gg.beta, gstate, b.segments(gpu()), p, gout);
  EXPECT_EQ(compare(gout, cout, kChunkTol), "");
  EXPECT_EQ(compare(gstate, cstate, kChunkTol), "");
}

TEST(LinearAttentionCuda, DecodeBatchOfOneTokenRequests) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t hk = 4, hv = 8, dk = 128, dv = 128, bs = 37;
  Batch b;
  for (int64_t r = 0; r < bs; ++r) {
    b.lens.push_back(1);
    b.slots.push_back(static_cast<int32_t>(bs - 1 - r));
    b.has_init.push_back(r % 5 == 0 ? 0 : 1);
  }
  b.num_tokens = bs;
  const GdrBases bases = gdr_bases(rng, bs, hk, hv, dk, dv, 1.0f);
  const Tensor state = random_normal(rng, {bs + 3, hv, dk, dv}, 0.5f);
  const GdrInputs c = gdr_views(bases, Device::cpu());
  const GdrInputs gg = gdr_views(bases, gpu());
  Tensor cstate = state.clone(), gstate = to_gpu(state);
  Tensor cout = poisoned({bs, hv, dv}, DType::kF32), gout = to_gpu(cout);
  ops::GatedDeltaRuleParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(dk));
  ops::recurrent_gated_delta_rule(c.q, c.k, c.v, c.g, c.beta, cstate, b.segments(Device::cpu()), p, cout);
  ops::recurrent_gated_delta_rule(gg.q, gg.k, gg.v, gg.g, gg.beta, gstate, b.segments(gpu()), p, gout);
  EXPECT_EQ(compare(gout, cout, kF32Tol), "");
  EXPECT_EQ(compare(gstate, cstate, kF32Tol), "");
}

TEST(LinearAttentionCuda, BadSegmentsAreErrorsOnTheDevice) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 5, dim = 8;
  const Tensor x = to_gpu(random_normal(rng, {n, dim}));
  const Tensor w = to_gpu(random_normal(rng, {dim, 4}));
  const Tensor state = to_gpu(random_normal(rng, {4, dim, 3}));
  Tensor out = Tensor::empty({n, dim}, DType::kF32, gpu());
  auto conv = [&](const Batch& b) {
    return error_of([&] { ops::causal_conv1d(x, w, std::nullopt, state, b.segments(gpu()), true, out); });
  };
  Batch ok{{2, 3}, {0, 1}, {0, 1}, {}, {}, n};
  EXPECT_EQ(conv(ok), "");
  Batch b = ok;
  b.slots = {0, 4};
  EXPECT_NE(conv(b).find("outside the state pool"), std::string::npos) << conv(b);
  b = ok;
  b.slots = {1, 1};
  EXPECT_NE(conv(b).find("used twice"), std::string::npos) << conv(b);
  b = ok;
  b.lens = {2, 2};
  EXPECT_NE(conv(b).find("num_tokens"), std::string::npos) << conv(b);
  b = ok;
  b.track_slots = {2, 0};
  b.track_lens = {1, 1};
  EXPECT_NE(conv(b).find("track slot 0 of request 1 is used twice"), std::string::npos) << conv(b);
  b.track_slots = {2, -1};
  b.track_lens = {3, 0};
  EXPECT_NE(conv(b).find("track length 3 of request 0 must be in [1, 2]"), std::string::npos) << conv(b);
}

TEST(LinearAttentionCuda, GatesNormsAndSigmoidsMatchCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(wd));
    // gdn_gating with a and b as the halves of one [n, 2 * hv] projection (strided views).
    const int64_t n = 133, hv = 6;
    const Tensor ba = random_normal(rng, {n, 2 * hv}, 12.0f);  // reaches the softplus threshold 20
    const Tensor A_log = random_dtype(rng, {hv}, wd), dt_bias = random_dtype(rng, {hv}, wd);
    const Tensor gba = to_gpu(ba);
    Tensor cg = poisoned({n, hv}, DType::kF32), cb = poisoned({n, hv}, DType::kF32);
    Tensor gg = to_gpu(cg), gb = to_gpu(cb);
    ops::gdn_gating(ba.slice(1, hv, 2 * hv), ba.slice(1, 0, hv), A_log, dt_bias, cg, cb);
    ops::gdn_gating(gba.slice(1, hv, 2 * hv), gba.slice(1, 0, hv), to_gpu(A_log), to_gpu(dt_bias), gg, gb);
    EXPECT_EQ(compare(gg, cg, kF32Tol), "");
    EXPECT_EQ(compare(gb, cb, kF32Tol), "");

    // rms_norm_gated on [n, heads, d] (in place) and on an odd 2-D [n, d].
    for (const Shape& shape : {Shape{41, 5, 128}, Shape{29, 37}}) {
      const int64_t d = shape.back();
      const Tensor x = random_normal(rng, shape, 2.0f), z = random_normal(rng, shape);
      const Tensor w = random_dtype(rng, {d}, wd);
      Tensor cx = x.clone(), gx = to_gpu(x);
      Tensor cout = poisoned(shape, DType::kF32), gout = to_gpu(cout);
      ops::rms_norm_gated(cx, z, w, 1e-6f, cout);
      ops::rms_norm_gated(gx, to_gpu(z), to_gpu(w), 1e-6f, gout);
      EXPECT_EQ(compare(gout, cout, kF32Tol), "");
      ops::rms_norm_gated(cx, z, w, 1e-6f, cx);
      ops::rms_norm_gated(gx, to_gpu(z), to_gpu(w), 1e-6f, gx);
      EXPECT_EQ(compare(gx, cx, kF32Tol), "");
    }
  }
  // sigmoid_mul on per-head views of a fused projection (gate heads after the value heads), in place.
  const int64_t n = 53, heads = 3, d = 129;
  const Tensor base = random_normal(rng, {n, 2 * heads, d}, 3.0f);
  Tensor cbase = base.clone(), gbase = to_gpu(base);
  const Tensor cx = cbase.slice(1, 0, heads), cgate = cbase.slice(1, heads, 2 * heads);
  const Tensor gx = gbase.slice(1, 0, heads), ggate = gbase.slice(1, heads, 2 * heads);
  Tensor cout = poisoned({n, heads, d}, DType::kF32), gout = to_gpu(cout);
  ops::sigmoid_mul(cx, cgate, cout);
  ops::sigmoid_mul(gx, ggate, gout);
  EXPECT_EQ(compare(gout, cout, kF32Tol), "");
  ops::sigmoid_mul(cx, cgate, cx);
  ops::sigmoid_mul(gx, ggate, gx);
  EXPECT_EQ(compare(gbase, cbase, kF32Tol), "");
  // sigmoid_gate_add with the gate a column of a wider tensor.
  const int64_t rows = 77, width = 130;
  const Tensor sx = random_normal(rng, {rows, width}), acc = random_normal(rng, {rows, width});
  const Tensor gates = random_normal(rng, {rows, 3}, 4.0f);
  Tensor cacc = acc.clone(), gacc = to_gpu(acc);
  ops::sigmoid_gate_add(sx, gates.slice(1, 1, 2), cacc);
  ops::sigmoid_gate_add(to_gpu(sx), to_gpu(gates).slice(1, 1, 2), gacc);
  EXPECT_EQ(compare(gacc, cacc, kF32Tol), "");
}

TEST(MoeCuda, TopkSoftmaxMatchesCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t experts : {8, 61, 512}) {
    const int64_t n = 37;
    Tensor logits = random_normal(rng, {n, experts + 3}, 2.0f);  // a strided view: 3 spare columns
    for (int64_t e = 0; e < experts; ++e) logits.at<float>({0, e}) = 0.25f;  // all tied: lowest ids win
    logits.at<float>({1, experts - 1}) = logits.at<float>({1, experts / 2}) = 9.0f;  // a tie at the top
    const Tensor cl = logits.slice(1, 0, experts), gl = to_gpu(logits).slice(1, 0, experts);
    for (int64_t top_k : {int64_t{1}, int64_t{3}, std::min<int64_t>(10, experts), experts}) {
      if (top_k > 64) continue;
      for (bool renorm : {false, true}) {
        SCOPED_TRACE(str("experts ", experts, " top_k ", top_k, " renorm ", renorm));
        Tensor cw = poisoned({n, top_k}, DType::kF32), cid = poisoned({n, top_k}, DType::kI32);
        Tensor gw = to_gpu(cw), gid = to_gpu(cid);
        ops::moe_topk_softmax(cl, renorm, cw, cid);
        ops::moe_topk_softmax(gl, renorm, gw, gid);
        EXPECT_EQ(ints(gid), ints(cid));
        const Tensor hw = to_cpu(gw);
        for (int64_t i = 0; i < cw.numel(); ++i) {
          ASSERT_NEAR(hw.data<float>()[i], cw.data<float>()[i], 1e-6) << "entry " << i;
        }
      }
    }
  }
}

TEST(MoeCuda, ExpertsMatchCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t hidden = 72, inter = 40, experts = 16, top_k = 4;
  const Tensor w_gate_up = random_normal(rng, {experts, 2 * inter, hidden}, 0.2f);
  const Tensor w_down = random_normal(rng, {experts, hidden, inter}, 0.2f);
  for (int64_t n : {1, 37, 300, 2100}) {  // 2100 > the 2048-token chunk of the CUDA branch
    const Tensor x_base = random_normal(rng, {n, hidden + 8});
    const Tensor cx = x_base.slice(1, 0, hidden), gx = to_gpu(x_base).slice(1, 0, hidden);
    Tensor w = Tensor::empty({n, top_k}, DType::kF32), ids = Tensor::empty({n, top_k}, DType::kI32);
    ops::moe_topk_softmax(random_normal(rng, {n, experts}, 2.0f), true, w, ids);
    for (DType dt : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(str("n ", n, " ", dtype_name(dt)));
      const Tensor gu = w_gate_up.to(dt), dn = w_down.to(dt);
      Tensor cout = poisoned({n, hidden}, DType::kF32), gout = to_gpu(cout);
      ops::moe_experts(cx, gu, dn, w, ids, cout);
      ops::moe_experts(gx, to_gpu(gu), to_gpu(dn), to_gpu(w), to_gpu(ids), gout);
      EXPECT_EQ(compare(gout, cout, dt == DType::kF32 ? kF32Tol : kBf16Tol), "");
    }
  }
  // Bad routes are errors found on the device.
  const int64_t n = 3;
  const Tensor gx = to_gpu(random_normal(rng, {n, hidden}));
  const Tensor gw = to_gpu(random_normal(rng, {n, 2}));
  Tensor gout = Tensor::empty({n, hidden}, DType::kF32, gpu());
  auto run = [&](const std::vector<int32_t>& ids) {
    return error_of([&] {
      ops::moe_experts(gx, to_gpu(w_gate_up), to_gpu(w_down), gw, to_gpu(Tensor::from_vector(ids, {n, 2})), gout);
    });
  };
  EXPECT_EQ(run({0, 1, 2, 3, 15, 14}), "");
  EXPECT_NE(run({0, 1, 2, 16, 4, 5}).find("topk_ids[1, 1] = 16 is outside"), std::string::npos) << run({0, 1, 2, 16, 4, 5});
  EXPECT_NE(run({0, 1, 2, 3, 7, 7}).find("token 2 lists expert 7 twice"), std::string::npos) << run({0, 1, 2, 3, 7, 7});
}

// GGUF experts kept in their blocks (cuda::quant_linear per expert) against the CPU's
// ops::moe_experts on the same tensors: its f32-activation reference mode always, its default
// 8-bit path too where the GPU computes the same 8-bit activations (tolerances in the header).
TEST(MoeCuda, QuantizedExpertsMatchCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t hidden = 512, inter = 256, experts = 16, top_k = 4;  // K-quants: multiples of 256
  const ops::QuantizedActivations mode = ops::quantized_linear_activations();
  struct Case {
    DType gate_up, down;
  };
  // Q4_K_M's pair; 32-value blocks in both; f32 gate/up beside quantized down (a GGUF whose gate
  // and up types differ: load_sparse_moe dequantizes them).
  for (const Case& k : {Case{DType::kQ4_K, DType::kQ6_K}, Case{DType::kQ8_0, DType::kQ8_0},
                        Case{DType::kF32, DType::kQ6_K}}) {
    auto experts_of = [&](DType dt, int64_t rows, int64_t cols) {
      if (!is_quantized(dt)) return random_normal(rng, {experts, rows, cols}, 0.05f);
      Tensor t = Tensor::empty({experts, rows, cols}, dt);
      fill_random_blocks(dt, t.data_ptr(), experts * rows * cols / dtype_block_size(dt), rng.gen()(), 0.1f);
      return t;
    };
    const Tensor gu = experts_of(k.gate_up, 2 * inter, hidden), dn = experts_of(k.down, hidden, inter);
    const Tensor ggu = to_gpu(gu), gdn = to_gpu(dn);
    // The GPU's GEMV quantizes activations to 32-value blocks; the CPU does so for 32-value types
    // only (256-value blocks for K-quants), so only then are the 8-bit paths the same arithmetic.
    bool same_blocks = true;
    for (DType dt : {k.gate_up, k.down})
      same_blocks = same_blocks && (!is_quantized(dt) || cpu::activation_block(dt) == 32);
    for (int64_t n : {1, 5, 37, 300}) {
      SCOPED_TRACE(str(dtype_name(k.gate_up), " / ", dtype_name(k.down), " n ", n));
      const Tensor x_base = random_normal(rng, {n, hidden + 8});
      const Tensor cx = x_base.slice(1, 0, hidden), gx = to_gpu(x_base).slice(1, 0, hidden);
      Tensor w = Tensor::empty({n, top_k}, DType::kF32), ids = Tensor::empty({n, top_k}, DType::kI32);
      ops::moe_topk_softmax(random_normal(rng, {n, experts}, 2.0f), true, w, ids);
      Tensor ref = poisoned({n, hidden}, DType::kF32), q8 = poisoned({n, hidden}, DType::kF32);
      ops::set_quantized_linear_activations(ops::QuantizedActivations::kF32);
      ops::moe_experts(cx, gu, dn, w, ids, ref);
      ops::set_quantized_linear_activations(ops::QuantizedActivations::kInt8);
      ops::moe_experts(cx, gu, dn, w, ids, q8);
      ops::set_quantized_linear_activations(mode);
      Tensor gout = to_gpu(poisoned({n, hidden}, DType::kF32));
      ops::moe_experts(gx, ggu, gdn, to_gpu(w), to_gpu(ids), gout);
      // An expert's rows decide its quantized projections' path: <= kQuantGemvMaxRows the 8-bit
      // GEMV (always when n <= 8), more the bf16 GEMM.
      std::vector<int64_t> rows(experts, 0);
      for (int64_t i = 0; i < n * top_k; ++i) ++rows[ids.data<int32_t>()[i]];
      const bool all_gemm = std::all_of(rows.begin(), rows.end(),
                                        [](int64_t r) { return r == 0 || r > cuda::kQuantGemvMaxRows; });
      EXPECT_EQ(compare(gout, ref, all_gemm ? kQuantGemmTol : kQuantTol), "")
          << "vs the f32-activation reference";
      if (same_blocks && n <= cuda::kQuantGemvMaxRows) {
        EXPECT_EQ(compare(gout, q8, kQuantGemvTol), "") << "vs the 8-bit CPU path";
      }
    }
  }
}

// FP8 experts (cuda::fp8_linear per expert on its slice of the codes and scales) against the CPU's
// ops::moe_experts on the same tensors (tolerance in the header), per output channel and in
// 128 x 128 blocks, decode-sized calls (every expert a GEMV) to prefill-sized ones.
TEST(MoeCuda, Fp8ExpertsMatchCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t hidden = 256, inter = 128, experts = 16, top_k = 4;
  auto random_fp8 = [&](Shape shape) {
    Tensor t = Tensor::empty(shape, DType::kF8E4M3);
    t.copy_(random_normal(rng, shape, 60.0f));
    return t;
  };
  const Tensor gu = random_fp8({experts, 2 * inter, hidden}), dn = random_fp8({experts, hidden, inter});
  const Tensor ggu = to_gpu(gu), gdn = to_gpu(dn);
  for (int64_t block : {int64_t{0}, int64_t{128}}) {
    ops::MoeFp8Scales s;
    s.gate_up.block_n = s.gate_up.block_k = s.down.block_n = s.down.block_k = block;
    s.gate_up.weight_scale = block > 0
                                 ? uniform(rng, {experts, 2 * inter / block, hidden / block}, 1e-3, 4e-3)
                                 : uniform(rng, {experts, 2 * inter}, 1e-3, 4e-3);
    s.down.weight_scale = block > 0 ? uniform(rng, {experts, hidden / block, inter / block}, 1e-3, 4e-3)
                                    : uniform(rng, {experts, hidden}, 1e-3, 4e-3);
    ops::MoeFp8Scales gs = s;
    gs.gate_up.weight_scale = to_gpu(s.gate_up.weight_scale);
    gs.down.weight_scale = to_gpu(s.down.weight_scale);
    for (int64_t n : {1, 5, 37, 300}) {
      SCOPED_TRACE(str("block ", block, " n ", n));
      const Tensor x_base = random_normal(rng, {n, hidden + 8});
      const Tensor cx = x_base.slice(1, 0, hidden), gx = to_gpu(x_base).slice(1, 0, hidden);
      Tensor w = Tensor::empty({n, top_k}, DType::kF32), ids = Tensor::empty({n, top_k}, DType::kI32);
      ops::moe_topk_softmax(random_normal(rng, {n, experts}, 2.0f), true, w, ids);
      Tensor ref = poisoned({n, hidden}, DType::kF32);
      ops::moe_experts(cx, gu, dn, w, ids, ref, s);
      Tensor gout = to_gpu(poisoned({n, hidden}, DType::kF32));
      ops::moe_experts(gx, ggu, gdn, to_gpu(w), to_gpu(ids), gout, gs);
      const Tensor got = to_cpu(gout);
      double num = 0, den = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        const double d = got.data<float>()[i] - ref.data<float>()[i];
        num += d * d;
        den += static_cast<double>(ref.data<float>()[i]) * ref.data<float>()[i];
      }
      std::printf("[fp8 moe cuda] block %3lld n %3lld: rel L2 vs the CPU FP8 path %.3e\n",
                  static_cast<long long>(block), static_cast<long long>(n), std::sqrt(num / den));
      EXPECT_EQ(compare_poisoned(got, ref, kFp8MoeTol), "");
    }
  }
  // The f32-activation reference mode is CPU-only.
  const Tensor gx = to_gpu(random_normal(rng, {2, hidden}));
  Tensor gw = to_gpu(Tensor::from_vector(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, {2, 2}));
  Tensor gids = to_gpu(Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3}, {2, 2}));
  ops::MoeFp8Scales gs;
  gs.gate_up.weight_scale = to_gpu(uniform(rng, {experts, 2 * inter}, 1e-3, 4e-3));
  gs.down.weight_scale = to_gpu(uniform(rng, {experts, hidden}, 1e-3, 4e-3));
  Tensor gout = Tensor::empty({2, hidden}, DType::kF32, gpu());
  ops::set_fp8_linear_activations(ops::Fp8Activations::kF32);
  const std::string error = error_of([&] { ops::moe_experts(gx, ggu, gdn, gw, gids, gout, gs); });
  ops::set_fp8_linear_activations(ops::Fp8Activations::kFp8);
  EXPECT_NE(error.find("CPU-only"), std::string::npos) << error;
}

}  // namespace
}  // namespace rlm
