// CUDA quantized linear and row dequantization (kernels/cuda/quant_matmul) for every GGUF block
// type against their CPU twins, on fresh random blocks and activations.
// Decode GEMV (m <= 8): the CUDA kernel quantizes x to 8-bit 32-value blocks exactly as the CPU's
// cpu::quantize_activations does (same rounding, bit for bit), so its reference is the
// double-precision dot of the dequantized weights (formats/gguf_dequant) with the dequantized
// activation blocks d * q; all it may differ by is f32 rounding of the unit scales and the sums:
//   |gpu - ref| <= 1e-5 * S,  S = |bias_j| + sum_k |w_jk * d_b q_ik|.
// Prefill (m > 8) against the CPU's f32-activation reference mode (weights dequantized, f32 sgemm):
// x and the dequantized weight rounded to bf16 (each to 2^-9 relative), f32 accumulation:
//   |gpu - cpu| <= (2 * 2^-9 + 1e-5) * S,  S = |bias_j| + sum_k |x_ik w_jk|.
// Rows dequantized on the GPU (embeddings) are bit-identical to the CPU reference. Outputs are
// poisoned with NaN: padding columns must stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "formats/gguf_dequant.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cuda/quant_matmul.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::poisoned;
using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL,
                        DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS};

Tensor random_blocks(DType dtype, int64_t rows, int64_t k, uint64_t seed) {
  Tensor w = Tensor::empty({rows, k}, dtype);
  fill_random_blocks(dtype, w.data_ptr(), rows * k / dtype_block_size(dtype), seed, 0.5f);
  return w;
}

// out = x * w^T + bias through ops::linear on the GPU, checked row by row against the reference
// of the header comment (m <= 8: double on the 8-bit activations; m > 8: the CPU f32 twin).
void check_linear(TestRng& rng, DType dtype, int64_t m, int64_t k, int64_t n) {
  SCOPED_TRACE(str(dtype_name(dtype), " m ", m, " k ", k, " n ", n));
  const Tensor w = random_blocks(dtype, n, k, rng.gen()());
  const Tensor wf = dequantize(w);
  const Tensor x = random_normal(rng, {m, k});
  const Tensor bias = random_normal(rng, {n});
  const Tensor out_g = to_gpu(poisoned({m, n + 3}, DType::kF32));
  ops::linear(to_gpu(x), to_gpu(w), to_gpu(bias), out_g.slice(1, 1, n + 1));
  const Tensor got = to_cpu(out_g);
  const bool gemv = m <= cuda::kQuantGemvMaxRows;
  // The activations each path multiplies: 8-bit blocks (GEMV) or x itself (prefill, vs the CPU twin).
  std::vector<double> xa(static_cast<size_t>(m * k));
  Tensor twin = poisoned({m, n}, DType::kF32);
  if (gemv) {
    cpu::Q8Activations act;
    cpu::quantize_activations(cpu::CpuIsa::kScalar, x.data<float>(), m, k, k, 32, &act);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < k; ++c) {
        xa[i * k + c] = static_cast<double>(act.row_d(i)[c / 32]) * act.row_q(i)[c];
      }
    }
  } else {
    for (int64_t i = 0; i < m * k; ++i) xa[i] = x.data<float>()[i];
    ops::set_quantized_linear_activations(ops::QuantizedActivations::kF32);
    ops::linear(x, w, bias, twin);
    ops::set_quantized_linear_activations(ops::QuantizedActivations::kInt8);
  }
  const double rel = gemv ? 1e-5 : 2.0 / 512 + 1e-5;
  for (int64_t i = 0; i < m; ++i) {
    ASSERT_TRUE(std::isnan(got.at<float>({i, 0})) && std::isnan(got.at<float>({i, n + 1})) &&
                std::isnan(got.at<float>({i, n + 2})))
        << "padding written in row " << i;
    for (int64_t j = 0; j < n; ++j) {
      double ref = bias.at<float>({j}), s = std::fabs(ref);
      for (int64_t c = 0; c < k; ++c) {
        const double t = xa[i * k + c] * wf.data<float>()[j * k + c];
        ref += t;
        s += std::fabs(t);
      }
      const double want = gemv ? ref : twin.at<float>({i, j});
      ASSERT_NEAR(got.at<float>({i, j + 1}), want, rel * s + 1e-6) << "(" << i << ", " << j << ")";
    }
  }
}

TEST(QuantMatmulCuda, LinearMatchesReference) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType dtype : kTypes) {
    // Rows of 35 blocks or 6 super-blocks (48 units): lanes take one or two units of a row.
    const int64_t k = dtype_block_size(dtype) == 32 ? 1120 : 1536;
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 40}) check_linear(rng, dtype, m, k, 203);
  }
}

// Q4_K (and Q5_K for more than one row of x) run the paired-group kernel by default; the one-group
// kernel (what the other types run) must stay right for them too. Rows of 39 super-blocks (156
// units of 64 values): lanes take 4 or 5 units, an odd count for the loop unrolled twice.
TEST(QuantMatmulCuda, PairedAndOneGroupKernelsMatchReference) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (bool pairs : {true, false}) {
    SCOPED_TRACE(pairs ? "paired-group kernel" : "one-group kernel");
    cuda::set_quant_gemv_pairs_enabled(pairs);
    for (DType dtype : {DType::kQ4_K, DType::kQ5_K}) {
      for (int64_t m : {1, 2, 5, 8}) check_linear(rng, dtype, m, 9984, 67);
    }
  }
  cuda::set_quant_gemv_pairs_enabled(true);
}

// Q8_0, Q3_K and Q6_K copy each warp's next units into shared memory by default; the per-lane
// loads (cuda::set_quant_gemv_staged_enabled(false)) must stay right too. Rows of 75 blocks or 25
// super-blocks (200 units): full stages (64 units of Q8_0, 160 of Q3_K, 96 of Q6_K) and a short
// last one, rows starting at every even offset from a 16-byte boundary.
TEST(QuantMatmulCuda, StagedAndPerLaneLoadsMatchReference) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "units staged in shared memory" : "units loaded per lane");
    cuda::set_quant_gemv_staged_enabled(staged);
    for (DType dtype : {DType::kQ8_0, DType::kQ3_K, DType::kQ6_K}) {
      const int64_t k = dtype_block_size(dtype) == 32 ? 2400 : 6400;
      for (int64_t m : {1, 2, 8}) check_linear(rng, dtype, m, k, 45);
    }
  }
  cuda::set_quant_gemv_staged_enabled(true);
}

// x too long for 8 (or 4, 2) rows of 8-bit activations in shared memory: fewer rows per launch.
TEST(QuantMatmulCuda, LongRowsRunInFewerRowsPerLaunch) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType dtype : {DType::kQ4_0, DType::kQ4_K}) {
    for (int64_t m : {3, 8}) check_linear(rng, dtype, m, 65536, 37);
  }
}

// Long x is quantized once per launch (quant_x_kernel) and copied by every block, short x by every
// block itself (cuda::quant_gemv_prequantize_min decides): the two prologues must give the same
// bits, for every type, 1-8 rows of x, x contiguous (16-byte loads) and at an odd offset with an odd
// row stride (scalar loads), rows long enough for several rounds of the blocks' copy.
TEST(QuantMatmulCuda, PrequantizedXGivesTheBlockQuantizedBits) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t saved = cuda::quant_gemv_prequantize_min();
  const int64_t n = 75;
  for (DType dtype : kTypes) {
    const int64_t k = dtype_block_size(dtype) == 32 ? 4480 : 4608;
    const Tensor w = to_gpu(random_blocks(dtype, n, k, rng.gen()()));
    const Tensor bias = to_gpu(random_normal(rng, {n}));
    for (int64_t m : {1, 2, 3, 8}) {
      const Tensor x_wide = random_normal(rng, {m, k + 1});
      for (bool offset : {false, true}) {
        SCOPED_TRACE(str(dtype_name(dtype), " m ", m, offset ? " x at an odd offset" : " x contiguous"));
        const Tensor x =
            offset ? to_gpu(x_wide).slice(1, 1, k + 1) : to_gpu(x_wide.slice(1, 0, k).contiguous());
        Tensor got[2];
        for (int pre = 0; pre < 2; ++pre) {
          cuda::set_quant_gemv_prequantize_min(pre == 1 ? 1 : std::numeric_limits<int64_t>::max());
          const Tensor out = to_gpu(poisoned({m, n}, DType::kF32));
          ops::linear(x, w, bias, out);
          got[pre] = to_cpu(out);
        }
        for (int64_t i = 0; i < m * n; ++i) {
          const float a = got[0].data<float>()[i], b = got[1].data<float>()[i];
          ASSERT_EQ(std::memcmp(&a, &b, sizeof(float)), 0) << "value " << i << ": " << a << " vs " << b;
        }
      }
    }
  }
  cuda::set_quant_gemv_prequantize_min(saved);
}

TEST(QuantMatmulCuda, EmbeddingRowsAreTheCpuReferenceBits) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType dtype : kTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t vocab = 37, hidden = 512;
    const Tensor w = random_blocks(dtype, vocab, hidden, rng.gen()());
    const Tensor ids = Tensor::from_vector<int32_t>({3, 0, 36, 3, 17});
    Tensor want = Tensor::empty({5, hidden}, DType::kF32);
    ops::embedding(ids, w, want);
    const Tensor out_g = to_gpu(poisoned({5, hidden}, DType::kF32));
    ops::embedding(to_gpu(ids), to_gpu(w), out_g);
    const Tensor got = to_cpu(out_g);
    ASSERT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0);
    // Out-of-range ids are an error naming the id (checked before anything is written).
    const Tensor bad = Tensor::from_vector<int32_t>({1, 37});
    EXPECT_THROW(ops::embedding(to_gpu(bad), to_gpu(w), to_gpu(poisoned({2, hidden}, DType::kF32))), Error);
  }
}

}  // namespace
}  // namespace rlm
