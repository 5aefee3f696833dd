// The quantized CPU linear (kernels/cpu/quant_matmul + quant_dot) for every block type and every
// kernel this CPU runs (scalar, AVX2, AVX-512), against double-precision loops over the reference
// dequantization (formats/gguf_dequant, itself bit-exact with the gguf package), on fresh random
// weights and activations.
//
// Tolerances. The kernels' only approximation is the 8-bit rounding of the activations: in an
// activation block b with scale d_b = max|x| / 127 each value moves by at most d_b / 2, so
//   |out - ref| <= sum_b (d_b / 2) * sum_{k in b} |w_k|  +  float accumulation,
// and the test uses exactly that bound (the accumulation term: 1e-5 of sum |w_k x_k|). Against the
// dequantized *quantized* activations the integer sums are exact, so there the tolerance is the
// float accumulation alone.
#include "kernels/cpu/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "formats/gguf_dequant.h"
#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL,
                        DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS};

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

struct Problem {
  DType dtype;
  int64_t m, n, k;
  std::vector<uint8_t> w;  // [n, k] blocks
  std::vector<float> wf;   // dequantized [n, k]
  std::vector<float> x;    // [m, k]
  size_t row_bytes() const { return dtype_nbytes(dtype, k); }
};

Problem make_problem(DType dtype, int64_t m, int64_t n, int64_t blocks_per_row, uint64_t seed) {
  Problem p{dtype, m, n, blocks_per_row * dtype_block_size(dtype), {}, {}, {}};
  p.w.resize(static_cast<size_t>(n) * p.row_bytes());
  fill_random_blocks(dtype, p.w.data(), n * blocks_per_row, seed, 0.5f);
  p.wf.resize(static_cast<size_t>(n * p.k));
  dequantize_row(dtype, p.w.data(), p.wf.data(), n * p.k);
  std::mt19937 rng(static_cast<uint32_t>(seed) + 7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(static_cast<size_t>(m * p.k));
  for (float& v : p.x) v = normal(rng);
  // Outliers and an all-zero block: the per-block scales must cope with both.
  for (int64_t i = 0; i < m; ++i) p.x[static_cast<size_t>(i * p.k + (i * 37) % p.k)] *= 20.0f;
  if (m > 1) std::fill(p.x.begin() + p.k, p.x.begin() + p.k + 32, 0.0f);
  return p;
}

TEST(QuantMatmul, ActivationQuantizationIsTheSameOnEveryIsaAndWithinHalfAStep) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t block : {32, 256}) {
    const int64_t m = 3, k = 4 * 256;
    std::vector<float> x(static_cast<size_t>(m * k));
    for (float& v : x) v = normal(rng);
    std::fill(x.begin(), x.begin() + 256, 0.0f);  // a zero block: d = 0, q = 0
    x[300] = 1e4f;
    Q8Activations ref;
    quantize_activations(CpuIsa::kScalar, x.data(), m, k, k, block, &ref);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t b = 0; b < k / block; ++b) {
        const float d = ref.row_d(r)[b];
        for (int64_t j = 0; j < block; ++j) {
          const float xv = x[static_cast<size_t>(r * k + b * block + j)];
          ASSERT_LE(std::fabs(xv - d * ref.row_q(r)[b * block + j]), d / 2 * (1 + 1e-6f)) << r << " " << b << " " << j;
        }
      }
    }
    for (CpuIsa isa : isas()) {
      Q8Activations got;
      quantize_activations(isa, x.data(), m, k, k, block, &got);
      EXPECT_EQ(got.q, ref.q) << cpu_isa_name(isa);
      EXPECT_EQ(got.d, ref.d) << cpu_isa_name(isa);
      EXPECT_EQ(got.sum, ref.sum) << cpu_isa_name(isa);
      EXPECT_EQ(got.bsums, ref.bsums) << cpu_isa_name(isa);
    }
  }
}

// Every type x every ISA x batch sizes that cover 1..4-row tiles, tails and several passes.
TEST(QuantMatmul, MatchesDoublePrecisionReferenceWithinTheActivationRoundingBound) {
  uint64_t seed = 100;
  for (DType dtype : kTypes) {
    for (int64_t m : {1, 2, 3, 4, 5, 7, 70}) {
      const int64_t blocks = dtype_block_size(dtype) == 32 ? 5 : 2;
      const int64_t n = m == 70 ? 19 : 37;
      Problem p = make_problem(dtype, m, n, blocks, ++seed);
      Q8Activations act;
      quantize_activations(CpuIsa::kScalar, p.x.data(), m, p.k, p.k, activation_block(dtype), &act);
      const int64_t ab = act.block;
      for (CpuIsa isa : isas()) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + cpu_isa_name(isa) + " m=" + std::to_string(m));
        std::vector<float> out(static_cast<size_t>(m * n), std::nanf(""));  // poisoned
        quant_linear(p.x.data(), m, p.k, p.k, p.w.data(), dtype, n, p.row_bytes(), nullptr, DType::kF32, out.data(),
                     n, isa);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0, ref_q = 0, bound = 0, mag = 0;
            for (int64_t b = 0; b < p.k / ab; ++b) {
              const double d = act.row_d(i)[b];
              double wabs = 0;
              for (int64_t t = b * ab; t < (b + 1) * ab; ++t) {
                const double wv = p.wf[static_cast<size_t>(j * p.k + t)];
                const double xv = p.x[static_cast<size_t>(i * p.k + t)];
                ref += wv * xv;
                ref_q += wv * d * act.row_q(i)[t];
                wabs += std::fabs(wv);
                mag += std::fabs(wv * xv);
              }
              bound += d / 2 * wabs;
            }
            const double got = out[static_cast<size_t>(i * n + j)];
            ASSERT_TRUE(std::isfinite(got)) << "(" << i << ", " << j << ")";
            const double accum = 1e-5 * mag + 1e-6;
            ASSERT_NEAR(got, ref_q, accum) << "vs quantized activations (" << i << ", " << j << ")";
            ASSERT_NEAR(got, ref, bound + accum) << "vs f32 activations (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

// A row's result does not depend on the batch around it (batched generation equals one request
// at a time): every row of an m-row call has the bits of the same row alone (13 rows run the
// unpacked weight tiles of batches where the type has them, one row the packed kernels).
TEST(QuantMatmul, EachRowIsTheSameBitsInAnyBatch) {
  uint64_t seed = 300;
  for (DType dtype : kTypes) {
    const int64_t m = 13, n = 21;
    Problem p = make_problem(dtype, m, n, dtype_block_size(dtype) == 32 ? 70 : 3, ++seed);
    for (CpuIsa isa : isas()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + cpu_isa_name(isa));
      std::vector<float> batch(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
      quant_linear(p.x.data(), m, p.k, p.k, p.w.data(), dtype, n, p.row_bytes(), nullptr, DType::kF32, batch.data(),
                   n, isa);
      for (int64_t i = 0; i < m; ++i) {
        quant_linear(p.x.data() + i * p.k, 1, p.k, p.k, p.w.data(), dtype, n, p.row_bytes(), nullptr, DType::kF32,
                     one.data(), n, isa);
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(batch[i * n + j], one[j]) << "(" << i << ", " << j << ")";
      }
    }
  }
}

// Q4_K runs the packed kernels; Q5_0 with 6 rows the unpacked weight tiles of batches (k = 5632:
// several tiles per thread's chunk).
TEST(QuantMatmul, BiasRowStridesAndThreadCountsGiveTheSameBits) {
  const int64_t m = 6, n = 53, ldo = 60;
  for (DType dtype : {DType::kQ4_K, DType::kQ5_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    Problem p = make_problem(dtype, m, n, dtype_block_size(dtype) == 32 ? 176 : 1, 9);
    const int64_t ldx = p.k + 44;
    std::vector<float> x(static_cast<size_t>(m * ldx), 1e30f);  // row padding must not be read
    for (int64_t i = 0; i < m; ++i) std::copy_n(p.x.begin() + i * p.k, p.k, x.begin() + i * ldx);
    std::vector<float> bias(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) bias[j] = 0.25f * static_cast<float>(j);
    std::vector<float> plain(static_cast<size_t>(m * n));
    quant_linear(p.x.data(), m, p.k, p.k, p.w.data(), dtype, n, p.row_bytes(), nullptr, DType::kF32,
                 plain.data(), n);
    const int threads = num_threads();
    for (int t : {1, 2, 3}) {
      set_num_threads(t);
      std::vector<float> out(static_cast<size_t>(m * ldo), -7.0f);
      quant_linear(x.data(), m, p.k, ldx, p.w.data(), dtype, n, p.row_bytes(), bias.data(), DType::kF32,
                   out.data(), ldo);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(out[i * ldo + j], plain[i * n + j] + bias[j]) << t << " threads";
        for (int64_t j = n; j < ldo; ++j) ASSERT_EQ(out[i * ldo + j], -7.0f) << "padding written";
      }
    }
    set_num_threads(threads);
  }
}

}  // namespace
}  // namespace rlm::cpu
