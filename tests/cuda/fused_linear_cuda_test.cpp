// ops::fused_linear on the GPU (the decode GEMVs' RMSNorm prologue and SiLU-and-mul / accumulate
// epilogues, kernels/cuda/gemv_fusion.h) for 16-bit and block-quantized weights, on fresh random
// inputs, against the ops it replaces run in turn (rms_norm, linear, silu_and_mul, then adding into
// out):
// - the CUDA ops in turn: bit-identical. The fused kernel's dot products are the unfused GEMV's in
//   the same order, and its norm sums the squares in double as rms_norm does; x is drawn from bf16
//   values of magnitude >= 2^-6, whose squares sum exactly in double in any order, so both norms
//   (and the CPU's) give the same inverse RMS.
// - the CPU twins of those ops: relative L2 <= 1e-5. For 16-bit weights the CPU linear runs on x
//   rounded to the weight dtype as the GPU rounds it (the CPU twin would widen the weight and keep
//   x); for block-quantized ones on the dequantized weight and the 8-bit 32-value blocks of x that
//   the GPU multiplies (cpu::quantize_activations, bit for bit); only f32 summation orders differ.
// Where no kernel applies (3 rows, f32 weights, a switch off: block-quantized weights take the
// fused kernels only when switched on) fused_linear returns false and out keeps its poison.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "cuda/cuda_test_util.h"
#include "formats/gguf_dequant.h"
#include "kernels/cpu/quant_dot.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::poisoned;
using testing::random_dtype;
using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

// Random x whose values are bf16 numbers of magnitude >= 2^-6 (see the header comment).
Tensor exact_square_x(TestRng& rng, int64_t m, int64_t k) {
  Tensor x = random_normal(rng, {m, k}).to(DType::kBF16).to(DType::kF32).contiguous();
  for (int64_t i = 0; i < x.numel(); ++i) {
    float& v = x.data<float>()[i];
    if (std::fabs(v) < 0x1p-6f) v = std::copysign(0x1p-6f, v);
  }
  return x;
}

Tensor random_weight(TestRng& rng, DType dtype, int64_t n, int64_t k) {
  if (!is_quantized(dtype)) return random_dtype(rng, {n, k}, dtype, 0.5f);
  Tensor w = Tensor::empty({n, k}, dtype);
  fill_random_blocks(dtype, w.data_ptr(), n * k / dtype_block_size(dtype), rng.gen()(), 0.5f);
  return w;
}

// The fused op's reference on x's device: the ops in turn. out holds the accumulate case's start.
void ops_in_turn(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, const Tensor& out,
                 const Tensor* norm_weight, float eps, bool silu, bool accumulate) {
  const Device dev = x.device();
  const int64_t m = x.size(0), n = w.size(0);
  Tensor xin = x;
  if (norm_weight != nullptr) {
    xin = Tensor::empty(x.shape(), DType::kF32, dev);
    ops::rms_norm(x, *norm_weight, eps, xin);
  }
  Tensor y = Tensor::empty({m, n}, DType::kF32, dev);
  if (dev.is_cpu() && is_quantized(w.dtype())) {
    // The GPU GEMV's activations (x in 8-bit 32-value blocks, the CPU's quantize_activations bits)
    // times the dequantized weight, in f32 (the CPU's own K-quant kernels use 256-value blocks).
    cpu::Q8Activations act;
    cpu::quantize_activations(cpu::CpuIsa::kScalar, xin.data<float>(), m, x.size(1), x.size(1), 32, &act);
    Tensor xq = Tensor::empty(x.shape(), DType::kF32);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < x.size(1); ++c) {
        xq.data<float>()[i * x.size(1) + c] = act.row_d(i)[c / 32] * static_cast<float>(act.row_q(i)[c]);
      }
    }
    ops::linear(xq, dequantize(w), bias, y);
  } else {
    // The CPU twin multiplies f32 x by the widened weight; the GPU rounds x to a 16-bit weight's dtype.
    if (dev.is_cpu()) xin = xin.to(w.dtype()).to(DType::kF32);
    ops::linear(xin, w, bias, y);
  }
  if (silu) {
    Tensor act = Tensor::empty({m, n / 2}, DType::kF32, dev);
    ops::silu_and_mul(y, act);
    y = act;
  }
  if (!accumulate) {
    out.copy_(y);
    return;
  }
  const Tensor sum = to_cpu(out).clone(), add = to_cpu(y);
  for (int64_t i = 0; i < sum.numel(); ++i) sum.data<float>()[i] += add.data<float>()[i];
  out.copy_(sum.to(dev));
}

void check_fused(TestRng& rng, DType dtype, int64_t m, int64_t k, int64_t n, bool norm, bool silu,
                 bool accumulate, bool with_bias) {
  SCOPED_TRACE(str(dtype_name(dtype), " m ", m, " k ", k, " n ", n, norm ? " norm" : "", silu ? " silu" : "",
                   accumulate ? " accumulate" : "", with_bias ? " bias" : ""));
  const Tensor x = exact_square_x(rng, m, k);
  const Tensor w = random_weight(rng, dtype, n, k);
  const Tensor norm_w = random_dtype(rng, {k}, DType::kBF16, 0.5f);
  std::optional<Tensor> bias, gbias;
  if (with_bias) {
    bias = random_normal(rng, {n});
    gbias = to_gpu(*bias);
  }
  const int64_t cols = silu ? n / 2 : n;
  // out: a random residual when accumulating, else poison; one padding column on each side.
  Tensor start = accumulate ? random_normal(rng, {m, cols + 2}) : poisoned({m, cols + 2}, DType::kF32);
  const Tensor gx = to_gpu(x), gw = to_gpu(w), gnorm = to_gpu(norm_w);
  const Tensor fused = to_gpu(start), turn = to_gpu(start), cpu = start.clone();
  const float eps = 1e-5f;
  ops::LinearFusion f{norm ? &gnorm : nullptr, eps, silu, accumulate};
  ASSERT_TRUE(ops::fused_linear(gx, gw, gbias, fused.slice(1, 1, 1 + cols), f));
  ops_in_turn(gx, gw, gbias, turn.slice(1, 1, 1 + cols), norm ? &gnorm : nullptr, eps, silu, accumulate);
  ops_in_turn(x, w, bias, cpu.slice(1, 1, 1 + cols), norm ? &norm_w : nullptr, eps, silu, accumulate);
  const Tensor got = to_cpu(fused), want = to_cpu(turn);
  ASSERT_EQ(testing::compare_poisoned(got, want, 0.0), "") << "fused vs the CUDA ops in turn";
  EXPECT_EQ(testing::compare_poisoned(got, cpu, 1e-5), "") << "fused vs the CPU twins";
}

TEST(FusedLinearCuda, MatchesTheOpsInTurnForEveryFusion) {
  RLM_REQUIRE_CUDA();
  ASSERT_TRUE(ops::fused_linear_enabled()) << "run without RADIXLM_FUSED_GEMV=0";
  ops::set_fused_linear_quantized_enabled(true);  // off by default (slower so far), tested all the same
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  // 16-bit weights and the block types of each kernel family (the paired-group Q4_K / Q5_K kernel,
  // the one-group kernel with 16-byte, 2-byte and 4-byte unit loads). k = 1536: 6 super-blocks or
  // 48 blocks a row; n = 2 * 203 rows: an odd number of SiLU-and-mul columns.
  int case_index = 0;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0,
                      DType::kQ4_1, DType::kIQ4_XS}) {
    for (int64_t m : {1, 2}) {
      for (int mask = 0; mask < 8; ++mask) {
        check_fused(rng, dtype, m, 1536, 406, mask & 1, mask & 2, mask & 4, case_index++ % 3 == 0);
      }
    }
  }
  // x too long for the one-pass norm (the sums of squares from the staging registers: at most 8,192
  // values of x a block): the block reads x once more for them first.
  for (DType dtype : {DType::kBF16, DType::kQ4_K, DType::kQ8_0})
    check_fused(rng, dtype, 2, 8448, 134, true, true, true, true);
  // The Llama-3.1-8B decode shapes of the fused launches (QKV with the norm, gate/up with the norm
  // and SiLU-and-mul, down accumulating), one row of x.
  for (DType dtype : {DType::kBF16, DType::kQ4_K}) {
    check_fused(rng, dtype, 1, 4096, 6144, true, false, false, false);
    check_fused(rng, dtype, 1, 4096, 2 * 14336, true, true, false, false);
    check_fused(rng, dtype, 1, 14336, 4096, false, false, true, false);
  }
  ops::set_fused_linear_quantized_enabled(false);
}

TEST(FusedLinearCuda, ReturnsFalseWhereNoKernelAppliesAndWritesNothing) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t k = 256, n = 64;
  const Tensor gnorm = to_gpu(random_dtype(rng, {k}, DType::kBF16));
  auto untouched = [&](int64_t m, DType dtype, const ops::LinearFusion& f) {
    SCOPED_TRACE(str(dtype_name(dtype), " m ", m));
    const Tensor gx = to_gpu(random_normal(rng, {m, k}));
    const Tensor gw = to_gpu(random_weight(rng, dtype, n, k));
    const Tensor out = to_gpu(poisoned({m, f.silu_and_mul ? n / 2 : n}, DType::kF32));
    EXPECT_FALSE(ops::fused_linear(gx, gw, std::nullopt, out, f));
    const Tensor got = to_cpu(out);
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_TRUE(std::isnan(got.data<float>()[i])) << "element " << i;
  };
  const ops::LinearFusion all{&gnorm, 1e-6f, true, true};
  untouched(1, DType::kQ4_K, all);  // block-quantized weights: off by default
  ops::set_fused_linear_quantized_enabled(true);
  untouched(3, DType::kBF16, all);
  untouched(3, DType::kQ4_K, all);
  untouched(1, DType::kF32, all);
  ops::set_fused_linear_enabled(false);
  untouched(1, DType::kBF16, all);
  untouched(1, DType::kQ8_0, {.accumulate = true});
  ops::set_fused_linear_enabled(true);
  ops::set_fused_linear_quantized_enabled(false);
}

}  // namespace
}  // namespace rlm
