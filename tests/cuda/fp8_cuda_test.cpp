// The CUDA FP8 kernels against their CPU twins on fresh random inputs: activation quantization
// (bit-exact), the FP8 linear layer on each of its paths (tensor-core GEMV and cuBLASLt: relative
// L2 5e-4; CUDA-core GEMV and FMA: 1e-5, the same e4m3 products, f32 sums in another order), the
// FP8 KV store (bit-exact), SiLU-and-mul and RMSNorm folded into the activation quantization
// (bit-identical to the unfused GPU path) and paged attention over FP8 caches with per-layer scales (decode:
// relative L2 1e-5; prefill, the tensor-core kernel with q and P in f16: 5e-3; k_scale folded into the score
// scale, v_scale applied to the output).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/cuda_test_util.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cuda/fp8_linear.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::TestRng;

constexpr double kTol = 1e-5;
// cuBLASLt's FP8 GEMM runs on Hopper's FP8 tensor cores, whose accumulator keeps fewer mantissa
// bits than an f32 FMA chain: measured on an H100, relative L2 1.26e-4 and 1.30e-4 against the CPU
// twin for the first two cuBLASLt cases below (the CUDA-core GEMV and FMA paths stay within kTol;
// the third, cuBLASLt applying the scales itself, has not run on a GPU yet). The tensor-core GEMV
// ("gemv_mma") sums 32 products per MMA there and adds the MMAs in f32.
constexpr double kTolTensorCore = 5e-4;
// The tensor-core prefill kernel on FP8 caches (e4m3 widened to f16 exactly, q and P rounded to
// f16): attention_cuda_test's tolerance for f16 caches (tests/cuda/attention_cuda_test.cpp).
constexpr double kTolF16Attention = 5e-3;

Tensor random_fp8(TestRng& rng, Shape shape) {
  Tensor t = Tensor::empty(shape, DType::kF8E4M3);
  t.copy_(testing::random_normal(rng, shape, 60.0f));
  return t;
}

Tensor random_scales(TestRng& rng, Shape shape) {
  Tensor t = Tensor::empty(std::move(shape), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(rng.uniform(1e-3, 2e-2));
  return t;
}

// A random f8e4m3 weight [n, k] on the GPU and its scales: per channel (block 0) or block x block,
// with a static activation scale of 0.03 when static_input.
std::pair<Tensor, ops::Fp8Scales> random_gpu_fp8_linear(TestRng& rng, int64_t n, int64_t k, int64_t block,
                                                        bool static_input) {
  ops::Fp8Scales s;
  s.block_n = s.block_k = block;
  s.weight_scale = testing::to_gpu(
      random_scales(rng, block > 0 ? Shape{(n + block - 1) / block, (k + block - 1) / block} : Shape{n}));
  if (static_input) s.input_scale = testing::to_gpu(Tensor::from_vector(std::vector<float>{0.03f}));
  return {testing::to_gpu(random_fp8(rng, {n, k})), s};
}

TEST(Fp8Cuda, QuantizeRowsIsBitExact) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  // Groups of 40 and 128: one block per (row, group); one group per row (k % 4 == 0): the
  // vectorised kernel, rows of up to 16,384 values.
  for (const auto& [k, group] : {std::pair<int64_t, int64_t>{300, 40},
                                 {300, 128},
                                 {300, 300},
                                 {14336, 14336},
                                 {16384, 16384},
                                 {16388, 16388}}) {
    const int64_t m = 7, groups = (k + group - 1) / group;
    Tensor x = testing::random_normal(rng, {m, k}, 5.0f);
    x.select(0, 2).fill_(0.0);
    std::vector<uint8_t> q_cpu(m * k);
    std::vector<float> s_cpu(m * groups);
    cpu::quantize_fp8_rows(x.data<float>(), m, k, k, group, nullptr, q_cpu.data(), s_cpu.data());
    Tensor xg = testing::to_gpu(x);
    Tensor qg = Tensor::empty({m, k}, DType::kU8, testing::gpu()), sg = Tensor::empty({m, groups}, DType::kF32, testing::gpu());
    cuda::quantize_fp8_rows(0, xg.data<float>(), m, k, k, group, nullptr, static_cast<uint8_t*>(qg.data_ptr()),
                            sg.data<float>());
    Tensor q = testing::to_cpu(qg), s = testing::to_cpu(sg);
    for (int64_t i = 0; i < m * groups; ++i) ASSERT_EQ(s.data<float>()[i], s_cpu[i]) << "scale " << i;
    for (int64_t i = 0; i < m * k; ++i) ASSERT_EQ(q.data<uint8_t>()[i], q_cpu[i]) << "code " << i;
  }
}

struct LinearCase {
  int64_t m, n, k, block;
  bool static_input, bias;
};

class Fp8CudaLinear : public ::testing::TestWithParam<LinearCase> {};

TEST_P(Fp8CudaLinear, MatchesCpuTwin) {
  RLM_REQUIRE_CUDA();
  const LinearCase c = GetParam();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  Tensor w = random_fp8(rng, {c.n, c.k});
  ops::Fp8Scales s;
  s.block_n = s.block_k = c.block;
  s.weight_scale = random_scales(rng, c.block > 0 ? Shape{(c.n + c.block - 1) / c.block, (c.k + c.block - 1) / c.block}
                                                  : Shape{c.n});
  if (c.static_input) s.input_scale = Tensor::from_vector(std::vector<float>{0.03f});
  Tensor x = testing::random_normal(rng, {c.m, c.k}, 3.0f);
  std::optional<Tensor> bias;
  if (c.bias) bias = testing::random_normal(rng, {c.n});
  Tensor want = Tensor::empty({c.m, c.n}, DType::kF32);
  ops::linear(x, w, bias, want, s);
  ops::Fp8Scales sg = s;
  sg.weight_scale = testing::to_gpu(s.weight_scale);
  if (c.static_input) sg.input_scale = testing::to_gpu(s.input_scale);
  Tensor wg = testing::to_gpu(w);
  cuda::Fp8Weight view;
  view.data = wg.data_ptr();
  view.n = c.n;
  view.k = c.k;
  view.ldw = c.k;
  view.block_n = view.block_k = c.block;
  view.scale = sg.weight_scale.data<float>();
  const std::string path = cuda::fp8_linear_path(0, c.m, view, c.bias);
  SCOPED_TRACE(path);
  Tensor out = Tensor::empty({c.m, c.n}, DType::kF32, testing::gpu());
  ops::linear(testing::to_gpu(x), wg, bias ? std::optional<Tensor>(testing::to_gpu(*bias)) : std::nullopt, out, sg);
  const std::string diff = testing::compare_poisoned(
      testing::to_cpu(out), want,
      path.starts_with("cublaslt") || path.starts_with("gemv_mma") ? kTolTensorCore : kTol);
  EXPECT_EQ(diff, "");
}

// GEMV: the tensor-core kernel on sm_89+ when k % 64 == 0, else the CUDA-core one; the tensor-core
// kernel with 8 chunks a warp for grids of one wave (small n), 4 for larger ones (8,200 rows: 1,025
// blocks, more than one wave on any GPU of up to 256 multiprocessors).
INSTANTIATE_TEST_SUITE_P(
    Paths, Fp8CudaLinear,
    ::testing::Values(LinearCase{1, 256, 512, 0, false, false},      // GEMV, per channel
                      LinearCase{1, 8200, 1024, 0, false, true},     // GEMV, 4 chunks a warp, bias
                      LinearCase{7, 8200, 640, 128, false, false},   // GEMV, 4 chunks, blocks, 7 rows
                      LinearCase{8, 96, 1024, 0, false, true},       // GEMV, 8 rows, bias
                      LinearCase{3, 64, 256, 0, true, false},        // GEMV, static input scale
                      LinearCase{4, 200, 384, 128, false, false},    // GEMV, 128 x 128 blocks (partial)
                      LinearCase{1, 1000, 4096, 0, false, true},     // GEMV, n % 16 != 0, long rows
                      LinearCase{5, 333, 2048, 128, false, true},    // GEMV, blocks, odd n and m
                      LinearCase{2, 100, 208, 0, false, false},      // CUDA-core GEMV (k % 64 != 0)
                      LinearCase{6, 72, 400, 16, false, true},       // CUDA-core GEMV, 16 x 16 blocks
                      LinearCase{64, 256, 512, 0, false, true},      // cuBLASLt (sm_89+), our epilogue
                      LinearCase{33, 128, 256, 0, true, false},      // cuBLASLt, static input scale
                      LinearCase{160, 1024, 2048, 0, false, false},  // >= 128 rows, 16 tiles: our epilogue
                      LinearCase{384, 6144, 2048, 0, false, false},  // 144 tiles: cuBLASLt's own scaling
                      LinearCase{40, 200, 300, 128, false, false},   // FMA, blocks
                      LinearCase{20, 50, 70, 0, false, false}));     // FMA, unaligned

// The tensor-core GEMV's chunks a warp follow the grid (cuda::mma_gemv_unroll): 8 for a grid that
// is resident at once, 4 for one that is not, so the cases above run both kernels.
TEST(Fp8Cuda, GemvChunksFollowTheGrid) {
  RLM_REQUIRE_CUDA();
  if (std::getenv("RADIXLM_FP8_GEMV_UNROLL") != nullptr)
    GTEST_SKIP() << "RADIXLM_FP8_GEMV_UNROLL fixes the choice";
  cuda::Fp8Weight view;
  view.data = reinterpret_cast<void*>(uintptr_t{256});  // aligned; never read by fp8_linear_path
  view.k = view.ldw = 1024;
  view.n = 256;
  const std::string small = cuda::fp8_linear_path(0, 1, view);
  if (!small.starts_with("gemv_mma")) GTEST_SKIP() << "no FP8 tensor cores (path " << small << ")";
  EXPECT_EQ(small, "gemv_mma_u8");
  view.n = 8200;
  EXPECT_EQ(std::string(cuda::fp8_linear_path(0, 1, view)), "gemv_mma");
}

// SiLU-and-mul folded into the activation quantization (ops::silu_and_mul_linear on the GPU):
// the output bits of silu_and_mul followed by the FP8 linear on the GPU, for prefill-sized row
// counts (the fused path: `act` stays poisoned) and where it does not apply (8 rows: the GEMV;
// block scales; k % 4 != 0: `act` is written), dynamic and static activation scales, with and
// without bias.
TEST(Fp8Cuda, SiluAndMulFoldedIntoQuantizationIsBitIdentical) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  struct Case {
    int64_t m, n, k, block;
    bool static_input, bias, fused;
  };
  for (const Case& c :
       {Case{9, 64, 256, 0, false, false, true}, Case{300, 96, 1024, 0, false, true, true},
        Case{64, 128, 14336, 0, false, false, true}, Case{40, 64, 512, 0, true, false, true},
        Case{8, 64, 256, 0, false, false, false}, Case{64, 128, 512, 128, false, false, false},
        Case{33, 48, 90, 0, false, false, false}}) {
    SCOPED_TRACE(str("m ", c.m, " n ", c.n, " k ", c.k, " block ", c.block, " static ", c.static_input));
    const auto [w, s] = random_gpu_fp8_linear(rng, c.n, c.k, c.block, c.static_input);
    const Tensor gate_up = testing::to_gpu(testing::random_normal(rng, {c.m, 2 * c.k}, 3.0f));
    std::optional<Tensor> bias;
    if (c.bias) bias = testing::to_gpu(testing::random_normal(rng, {c.n}));
    Tensor act = Tensor::empty({c.m, c.k}, DType::kF32, testing::gpu());
    Tensor want = Tensor::empty({c.m, c.n}, DType::kF32, testing::gpu());
    ops::silu_and_mul(gate_up, act);
    ops::linear(act, w, bias, want, s);
    const Tensor act2 = testing::to_gpu(testing::poisoned({c.m, c.k}, DType::kF32));
    Tensor got = Tensor::empty({c.m, c.n}, DType::kF32, testing::gpu());
    ops::silu_and_mul_linear(gate_up, act2, w, bias, got, s);
    const Tensor g = testing::to_cpu(got), e = testing::to_cpu(want);
    ASSERT_EQ(std::memcmp(g.data_ptr(), e.data_ptr(), e.nbytes()), 0);
    const Tensor a2 = testing::to_cpu(act2);
    EXPECT_EQ(std::isnan(a2.data<float>()[0]), c.fused)
        << "act written: " << !std::isnan(a2.data<float>()[0]);
  }
}

// RMSNorm with the activation quantization folded in (cuda::fp8_linear_rms_norm, through
// ops::rms_norm_linear): the output bits -- the linear's, the normalised rows', the residual's -- of
// the norm followed by the FP8 linear on the GPU, plain and fused-add norms, decode-sized (GEMV)
// and prefill-sized (cuBLASLt) row counts, rows up to 8,192 wide, dynamic and static activation
// scales, f32 and bf16 norm weights, with and without bias; where it does not apply (block scales,
// rows the register kernel does not take) cuda::fp8_linear_rms_norm returns false and the op falls
// back to the two steps.
TEST(Fp8Cuda, RmsNormFoldedIntoQuantizationIsBitIdentical) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  struct Case {
    int64_t m, n, k, block;
    bool add, static_input, bias, bf16_norm, applies;
  };
  for (const Case& c : {Case{1, 64, 256, 0, true, false, false, true, true},
                        Case{1, 96, 4096, 0, false, false, true, true, true},
                        Case{3, 64, 8192, 0, true, false, false, false, true},
                        Case{8, 128, 1024, 0, true, true, false, true, true},
                        Case{9, 64, 512, 0, false, false, false, true, true},
                        Case{300, 96, 4096, 0, true, false, true, true, true},
                        Case{2, 64, 256, 128, true, false, false, true, false},    // block scales
                        Case{4, 48, 90, 0, true, false, false, true, false},       // k % 4 != 0
                        Case{2, 64, 8196, 0, true, false, false, true, false}}) {  // wider than 8,192
    SCOPED_TRACE(str("m ", c.m, " n ", c.n, " k ", c.k, " block ", c.block, " add ", c.add, " static ",
                     c.static_input));
    const auto [w, s] = random_gpu_fp8_linear(rng, c.n, c.k, c.block, c.static_input);
    const Tensor norm_w = testing::to_gpu(
        testing::random_normal(rng, {c.k}, 1.0f).to(c.bf16_norm ? DType::kBF16 : DType::kF32));
    const Tensor x0 = testing::random_normal(rng, {c.m, c.k}, 3.0f);
    const Tensor r0 = testing::random_normal(rng, {c.m, c.k}, 3.0f);
    std::optional<Tensor> bias;
    if (c.bias) bias = testing::to_gpu(testing::random_normal(rng, {c.n}));
    // The two steps.
    Tensor x1 = testing::to_gpu(x0), r1 = testing::to_gpu(r0);
    Tensor want = Tensor::empty({c.m, c.n}, DType::kF32, testing::gpu());
    if (c.add) {
      ops::fused_add_rms_norm(x1, r1, norm_w, 1e-5f);
    } else {
      ops::rms_norm(x1, norm_w, 1e-5f, x1);
    }
    ops::linear(x1, w, bias, want, s);
    // The folded kernel itself, where it applies.
    Tensor x2 = testing::to_gpu(x0), r2 = testing::to_gpu(r0);
    Tensor got = testing::to_gpu(testing::poisoned({c.m, c.n}, DType::kF32));
    cuda::Fp8Weight cw;
    cw.data = w.data_ptr();
    cw.n = c.n;
    cw.k = cw.ldw = c.k;
    cw.scale = s.weight_scale.data<float>();
    cw.block_n = cw.block_k = c.block;
    cw.input_scale = c.static_input ? s.input_scale.data<float>() : nullptr;
    auto rows = [&](const Tensor& t) {
      cuda::Rows r;
      r.data = const_cast<float*>(t.data<float>());
      r.n0 = c.m;
      r.stride0 = c.k;
      return r;
    };
    const bool ran = cuda::fp8_linear_rms_norm(
        testing::gpu().index, c.add, rows(x2), c.add ? rows(r2) : rows(x2), c.k, norm_w.data_ptr(),
        norm_w.dtype(), 1e-5f, cw, bias ? bias->data_ptr() : nullptr, DType::kF32, got.data<float>(), c.n);
    ASSERT_EQ(ran, c.applies);
    if (!ran) {  // the op falls back to the two steps
      Tensor x3 = testing::to_gpu(x0);
      r2 = testing::to_gpu(r0);
      ops::rms_norm_linear(x3, c.add ? &r2 : nullptr, norm_w, 1e-5f, w, bias, got, s);
      x2 = x3;
    }
    for (const auto& [name, g, e] :
         {std::tuple<const char*, Tensor, Tensor>{"out", got, want}, {"x", x2, x1}, {"residual", r2, r1}}) {
      const Tensor gc = testing::to_cpu(g), ec = testing::to_cpu(e);
      EXPECT_EQ(std::memcmp(gc.data_ptr(), ec.data_ptr(), ec.nbytes()), 0) << name;
    }
  }
}

// Every tested head size (the tuned 128, padded ones, q/k 192 with v 128): the FP8 KV store is
// bit-exact and the attention kernels that FP8 caches take (decode: the tensor-core kernel at
// head_dim 128, the vectorised one at the padded sizes; prefill: the tensor-core kernel) match the CPU twin.
// tests/cuda/attention_cuda_test.cpp covers more FP8 decode shapes (GQA groups, page sizes, split counts,
// misaligned caches: the scalar kernel).
TEST(Fp8Cuda, KvStoreAndAttentionMatchCpuTwin) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{128, 128}, {16, 16}, {32, 32}, {48, 48}, {64, 64}, {80, 80},
                       {96, 96}, {112, 112}, {160, 160}, {192, 192}, {256, 256}, {192, 128}}) {
    SCOPED_TRACE(str("head_dim ", d, " v_head_dim ", dv));
    const int64_t hk = 2, hq = 8, slots = 96;
    const float ks = 0.03f, vs = 0.07f;
    const int32_t len0 = 70, len1 = 21;
    const int64_t tokens = len0 + len1;
    Tensor k = testing::random_normal(rng, {tokens, hk, d}, 4.0f), v = testing::random_normal(rng, {tokens, hk, dv}, 4.0f);
    Tensor loc = Tensor::empty({tokens}, DType::kI32);
    for (int64_t t = 0; t < tokens; ++t) loc.data<int32_t>()[t] = static_cast<int32_t>((t * 37) % slots);
    Tensor kc = Tensor::zeros({slots, hk, d}, DType::kF8E4M3), vc = Tensor::zeros({slots, hk, dv}, DType::kF8E4M3);
    ops::store_kv_cache(k, v, kc, vc, loc, ks, vs);
    Tensor kcg = Tensor::zeros({slots, hk, d}, DType::kF8E4M3, testing::gpu());
    Tensor vcg = Tensor::zeros({slots, hk, dv}, DType::kF8E4M3, testing::gpu());
    ops::store_kv_cache(testing::to_gpu(k), testing::to_gpu(v), kcg, vcg, testing::to_gpu(loc), ks, vs);
    const Tensor kb = testing::to_cpu(kcg), vb = testing::to_cpu(vcg);
    ASSERT_EQ(std::memcmp(kb.data_ptr(), kc.data_ptr(), kc.nbytes()), 0);
    ASSERT_EQ(std::memcmp(vb.data_ptr(), vc.data_ptr(), vc.nbytes()), 0);
    // Two requests over the stored slots (page size 1): decode (one query each) and prefill (the
    // last 9 and 5 tokens as queries).
    std::vector<int32_t> idx(loc.data<int32_t>(), loc.data<int32_t>() + tokens);
    const Tensor kv_indptr = Tensor::from_vector(std::vector<int32_t>{0, len0, len0 + len1});
    const Tensor kv_indices = Tensor::from_vector(idx);
    const Tensor seq_lens = Tensor::from_vector(std::vector<int32_t>{len0, len1});
    for (const auto& qo : {std::vector<int32_t>{0, 1, 2}, std::vector<int32_t>{0, 9, 14}}) {
      const int64_t nq = qo.back();
      const Tensor qo_indptr = Tensor::from_vector(qo);
      Tensor q = testing::random_normal(rng, {nq, hq, d});
      ops::AttentionParams p;
      p.scale = 1.0f / std::sqrt(float(d));
      p.k_scale = ks;
      p.v_scale = vs;
      Tensor want = Tensor::empty({nq, hq, dv}, DType::kF32);
      ops::paged_attention(q, kc, vc, qo_indptr, kv_indptr, kv_indices, seq_lens, 1, p, want);
      Tensor got = Tensor::empty({nq, hq, dv}, DType::kF32, testing::gpu());
      ops::paged_attention(testing::to_gpu(q), kcg, vcg, testing::to_gpu(qo_indptr), testing::to_gpu(kv_indptr),
                           testing::to_gpu(kv_indices), testing::to_gpu(seq_lens), 1, p, got);
      // Prefill (more queries than requests) runs the tensor-core kernel: q and P in f16. Decode at
      // head_dim 64 / 128 runs the tensor-core decode kernel: q and P as f16 hi + lo parts (products
      // ~exact), summed in the MMA's f32 accumulator, which keeps fewer bits than an FMA chain (as
      // for the FP8 GEMMs above): 40 seeds on an H100 gave relative L2 up to 1.3e-5 there, for this
      // kernel and the one before it alike (docs/perf/decode_kernels.md, ninth section).
      const bool mma_decode = nq == 2 && d == dv && (d == 64 || d == 128);
      const double tol = nq > 2 ? kTolF16Attention : mma_decode ? kTolTensorCore : kTol;
      EXPECT_EQ(testing::compare_poisoned(testing::to_cpu(got), want, tol), "") << "queries " << nq;
    }
  }
}

}  // namespace
}  // namespace rlm
