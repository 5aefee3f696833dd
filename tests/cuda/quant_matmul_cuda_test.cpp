// CUDA quantized linear and row dequantization (kernels/cuda/quant_matmul) for every GGUF block
// type against their CPU twins, on fresh random blocks and activations.
// Twin: the CPU's f32-activation reference mode (weights dequantized by formats/gguf_dequant, f32
// sgemm). Tolerances, per output, relative to the magnitude of its terms S = sum_k |x_k w_k|:
//   decode GEMV (m <= 8): f32 dequantization and f32 products, summed in another order:
//     |gpu - cpu| <= 1e-5 * S;
//   prefill (m > 8): x and the dequantized weight rounded to bf16 (each to 2^-9 relative), f32
//     accumulation: |gpu - cpu| <= 2 * 2^-9 * S (+ 1e-5 * S for the order).
// Rows dequantized on the GPU (embeddings) are bit-identical to the CPU reference. Outputs are
// poisoned with NaN: padding columns must stay NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda/cuda_test_util.h"
#include "formats/gguf_dequant.h"
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

TEST(QuantMatmulCuda, LinearMatchesCpuTwin) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (DType dtype : kTypes) {
    const int64_t k = dtype_block_size(dtype) == 32 ? 320 : 768, n = 203;
    const Tensor w = random_blocks(dtype, n, k, rng.gen()());
    const Tensor wg = to_gpu(w);
    const Tensor wf = dequantize(w);
    for (int64_t m : {1, 3, 5, 8, 9, 40}) {
      SCOPED_TRACE(str(dtype_name(dtype), " m ", m));
      const Tensor x = random_normal(rng, {m, k});
      const Tensor bias = random_normal(rng, {n});
      Tensor want = poisoned({m, n + 3}, DType::kF32);
      {
        ops::set_quantized_linear_activations(ops::QuantizedActivations::kF32);
        ops::linear(x, w, bias, want.slice(1, 1, n + 1));
        ops::set_quantized_linear_activations(ops::QuantizedActivations::kInt8);
      }
      const Tensor out_g = to_gpu(poisoned({m, n + 3}, DType::kF32));
      ops::linear(to_gpu(x), wg, to_gpu(bias), out_g.slice(1, 1, n + 1));
      const Tensor got = to_cpu(out_g);
      const double rel = m <= cuda::kQuantGemvMaxRows ? 1e-5 : 2.0 / 512 + 1e-5;
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_TRUE(std::isnan(got.at<float>({i, 0})) && std::isnan(got.at<float>({i, n + 1})) &&
                    std::isnan(got.at<float>({i, n + 2})))
            << "padding written in row " << i;
        for (int64_t j = 0; j < n; ++j) {
          double s = std::fabs(bias.at<float>({j}));
          for (int64_t c = 0; c < k; ++c) s += std::fabs(x.at<float>({i, c}) * wf.at<float>({j, c}));
          ASSERT_NEAR(got.at<float>({i, j + 1}), want.at<float>({i, j + 1}), rel * s + 1e-6) << "(" << i << ", " << j << ")";
        }
      }
    }
  }
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
