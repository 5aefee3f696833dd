// FP8 (E4M3) on the CPU: the conversions against ml_dtypes/PyTorch (tools/make_fp8_reference.py),
// the FP8 linear layer against double-precision loops, the FP8 KV cache (store + attention) and the
// quantization_config parser's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "kernels/cpu/fp8_linear.h"
#include "model/model_config.h"
#include "model/quantization_config.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::TestRng;

TEST(Fp8Conversion, AllCodesRoundTrip) {
  int nan_codes = 0;
  for (int c = 0; c < 256; ++c) {
    const f8e4m3 v{static_cast<uint8_t>(c)};
    const float f = f8e4m3_to_f32(v);
    if (std::isnan(f)) {
      ++nan_codes;
      EXPECT_EQ(c & 0x7f, 0x7f) << "code " << c;
      EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f32_to_f8e4m3(f))));
      continue;
    }
    EXPECT_EQ(f32_to_f8e4m3(f).bits, c) << "code " << c << " value " << f;
  }
  EXPECT_EQ(nan_codes, 2);
  EXPECT_EQ(f8e4m3_to_f32(f8e4m3{0x7e}), kF8E4M3Max);
  EXPECT_EQ(f8e4m3_to_f32(f8e4m3{0x01}), std::ldexp(1.0f, -9));
}

TEST(Fp8Conversion, RoundingMatchesMlDtypesAndTorch) {
  const std::string path = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/fp8/e4m3_reference.bin";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << path << " (tools/make_fp8_reference.py)";
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size() % 5, 0u);
  const size_t n = bytes.size() / 5;
  ASSERT_GT(n, 4000u);
  size_t mismatches = 0;
  for (size_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, bytes.data() + 4 * i, 4);
    const auto want = static_cast<uint8_t>(bytes[4 * n + i]);
    const uint8_t got = f32_to_f8e4m3(x).bits;
    if (got != want && ++mismatches <= 10) ADD_FAILURE() << "x = " << x << ": got " << int(got) << " want " << int(want);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << n;
}

TEST(Fp8Conversion, TensorCopySaturates) {
  Tensor x = Tensor::from_vector(std::vector<float>{1000.0f, -1e9f, 0.3f, 2.0f});
  Tensor q = Tensor::empty({4}, DType::kF8E4M3);
  q.copy_(x);
  Tensor back = q.to(DType::kF32);
  EXPECT_EQ(back.data<float>()[0], 448.0f);
  EXPECT_EQ(back.data<float>()[1], -448.0f);
  EXPECT_EQ(back.data<float>()[2], f8e4m3_to_f32(f32_to_f8e4m3(0.3f)));
  EXPECT_EQ(back.data<float>()[3], 2.0f);
}

// ---- FP8 linear ----

struct Fp8Case {
  int64_t m, n, k, block_n, block_k;
  bool static_input, bias;
};

// A random e4m3 weight with positive scales of its layout.
struct RandomFp8Weight {
  Tensor weight, scale;  // f8e4m3 [n, k]; f32 [n] or blocks
  RandomFp8Weight(TestRng& rng, const Fp8Case& c) {
    weight = Tensor::empty({c.n, c.k}, DType::kF8E4M3);
    Tensor w = testing::random_normal(rng, {c.n, c.k}, 100.0f);
    weight.copy_(w);
    const Shape s = c.block_n > 0 ? Shape{(c.n + c.block_n - 1) / c.block_n, (c.k + c.block_k - 1) / c.block_k}
                                  : Shape{c.n};
    scale = Tensor::empty(s, DType::kF32);
    for (int64_t i = 0; i < scale.numel(); ++i) scale.data<float>()[i] = static_cast<float>(rng.uniform(1e-3, 2e-2));
  }
  double w(const Fp8Case& c, int64_t j, int64_t col) const {
    const double e = f8e4m3_to_f32(static_cast<const f8e4m3*>(weight.data_ptr())[j * c.k + col]);
    if (c.block_n == 0) return e * scale.data<float>()[j];
    const int64_t kb = (c.k + c.block_k - 1) / c.block_k;
    return e * scale.data<float>()[(j / c.block_n) * kb + col / c.block_k];
  }
};

class Fp8LinearTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8LinearTest, MatchesDoubleReference) {
  const Fp8Case c = GetParam();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  RandomFp8Weight rw(rng, c);
  Tensor x = testing::random_normal(rng, {c.m, c.k}, 2.0f);
  std::optional<Tensor> bias;
  if (c.bias) bias = testing::random_normal(rng, {c.n});
  ops::Fp8Scales s;
  s.weight_scale = rw.scale;
  s.block_n = c.block_n;
  s.block_k = c.block_k;
  const float static_scale = 0.05f;
  if (c.static_input) s.input_scale = Tensor::from_vector(std::vector<float>{static_scale});
  const int64_t group = c.block_n > 0 ? c.block_k : c.k;
  for (const ops::Fp8Activations mode : {ops::Fp8Activations::kFp8, ops::Fp8Activations::kF32}) {
    SCOPED_TRACE(mode == ops::Fp8Activations::kFp8 ? "fp8 activations" : "f32 activations");
    ops::set_fp8_linear_activations(mode);
    Tensor out = Tensor::empty({c.m, c.n}, DType::kF32);
    testing::poison(out);
    ops::linear(x, rw.weight, bias, out, s);
    double max_rel = 0.0;  // |out - ref| / (sum of |terms| + |bias|): f32 rounding of the sum
    for (int64_t i = 0; i < c.m; ++i) {
      const float* xr = x.data<float>() + i * c.k;
      // The activation quantization in double: scale per group, codes by the (tested) rounding.
      std::vector<double> xq(static_cast<size_t>(c.k));
      for (int64_t g0 = 0; g0 < c.k; g0 += group) {
        const int64_t g1 = std::min(c.k, g0 + group);
        float amax = 0.0f;
        for (int64_t col = g0; col < g1; ++col) amax = std::max(amax, std::fabs(xr[col]));
        const float sx = c.static_input ? static_scale : (amax > 0.0f ? amax / kF8E4M3Max : 1.0f);
        for (int64_t col = g0; col < g1; ++col) {
          xq[col] = mode == ops::Fp8Activations::kF32 ? xr[col]
                                                       : double(f8e4m3_to_f32(f32_to_f8e4m3(xr[col] / sx))) * sx;
        }
      }
      for (int64_t j = 0; j < c.n; ++j) {
        double ref = bias ? bias->data<float>()[j] : 0.0;
        double mag = std::abs(ref);
        for (int64_t col = 0; col < c.k; ++col) {
          ref += xq[col] * rw.w(c, j, col);
          mag += std::abs(xq[col] * rw.w(c, j, col));
        }
        max_rel = std::max(max_rel, std::abs(ref - out.data<float>()[i * c.n + j]) / (mag + 1e-30));
      }
    }
    // f32 sums of k exact products, scales multiplied in f32: a few f32 ulps of the magnitude.
    EXPECT_LE(max_rel, 1e-5);
  }
  ops::set_fp8_linear_activations(ops::Fp8Activations::kFp8);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp8LinearTest,
                         ::testing::Values(Fp8Case{1, 32, 64, 0, 0, false, false}, Fp8Case{5, 48, 160, 0, 0, false, true},
                                           Fp8Case{3, 16, 40, 0, 0, true, false},
                                           Fp8Case{4, 40, 96, 16, 32, false, false},
                                           Fp8Case{17, 70, 200, 32, 64, false, true},
                                           Fp8Case{2, 256, 256, 128, 128, false, false}));

TEST(Fp8Linear, QuantizeWeightPerChannel) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 9, k = 33;
  Tensor w = testing::random_normal(rng, {n, k}, 0.2f).to(DType::kBF16);
  w.select(0, 3).fill_(0.0);
  std::vector<uint8_t> q(static_cast<size_t>(n * k));
  std::vector<float> scale(static_cast<size_t>(n));
  cpu::quantize_fp8_weight_per_channel(w.data_ptr(), DType::kBF16, n, k, k, q.data(), scale.data());
  const Tensor wf = w.to(DType::kF32);
  for (int64_t j = 0; j < n; ++j) {
    float amax = 0.0f;
    for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(wf.data<float>()[j * k + c]));
    EXPECT_EQ(scale[j], amax > 0.0f ? amax / kF8E4M3Max : 1.0f) << "row " << j;
    for (int64_t c = 0; c < k; ++c) {
      const float x = wf.data<float>()[j * k + c];
      ASSERT_EQ(q[j * k + c], f32_to_f8e4m3(x / scale[j]).bits) << j << ", " << c;
      // Relative error of E4M3 (3 mantissa bits) is at most 2^-4 for normals.
      if (std::fabs(x) >= amax / 64) {
        EXPECT_NEAR(f8e4m3_to_f32(f8e4m3{q[j * k + c]}) * scale[j], x, std::fabs(x) / 16);
      }
    }
  }
}

TEST(Fp8Linear, RejectsBadScales) {
  Tensor x = Tensor::zeros({2, 32}, DType::kF32);
  Tensor w = Tensor::zeros({16, 32}, DType::kF8E4M3);
  Tensor out = Tensor::empty({2, 16}, DType::kF32);
  ops::Fp8Scales s;
  s.weight_scale = Tensor::zeros({15}, DType::kF32);
  EXPECT_THROW(ops::linear(x, w, std::nullopt, out, s), Error);
  EXPECT_THROW(ops::linear(x, w, std::nullopt, out), Error);  // an f8e4m3 weight needs its scales
  s.weight_scale = Tensor::zeros({1, 1}, DType::kF32);
  s.block_n = 16;
  s.block_k = 32;
  s.input_scale = Tensor::from_vector(std::vector<float>{1.0f});
  EXPECT_THROW(ops::linear(x, w, std::nullopt, out, s), Error);  // static input scale with blocks
}

// ops::silu_and_mul_linear on the CPU: silu_and_mul into act, then the FP8 linear (the fused
// quantization is CUDA's; tests/cuda/fp8_cuda_test.cpp holds it to these bits on the GPU).
TEST(Fp8Linear, SiluAndMulLinearIsSiluAndMulThenLinear) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int64_t m = 12, n = 20, k = 48;
  Tensor w = Tensor::empty({n, k}, DType::kF8E4M3);
  w.copy_(testing::random_normal(rng, {n, k}, 60.0f));
  ops::Fp8Scales s;
  s.weight_scale = testing::random_normal(rng, {n}, 0.01f);
  const Tensor gate_up = testing::random_normal(rng, {m, 2 * k}, 3.0f);
  const Tensor bias = testing::random_normal(rng, {n});
  Tensor act = Tensor::empty({m, k}, DType::kF32), want = Tensor::empty({m, n}, DType::kF32);
  ops::silu_and_mul(gate_up, act);
  ops::linear(act, w, bias, want, s);
  Tensor act2 = Tensor::zeros({m, k}, DType::kF32), got = Tensor::empty({m, n}, DType::kF32);
  ops::silu_and_mul_linear(gate_up, act2, w, bias, got, s);
  ASSERT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.nbytes()), 0);
  ASSERT_EQ(std::memcmp(act2.data_ptr(), act.data_ptr(), act.nbytes()), 0);
  // A gate_up that is not [m, 2 * k] is an error naming the op.
  EXPECT_THROW(ops::silu_and_mul_linear(testing::random_normal(rng, {m, k}), act2, w, bias, got, s), Error);
}

// ---- FP8 KV cache ----

// One request of `len` keys (page size 1) and its last `qo_len` tokens as queries.
struct KvBatch {
  Tensor qo_indptr, kv_indptr, kv_indices, seq_lens;
  KvBatch(int32_t len, int32_t qo_len) {
    qo_indptr = Tensor::from_vector(std::vector<int32_t>{0, qo_len});
    kv_indptr = Tensor::from_vector(std::vector<int32_t>{0, len});
    std::vector<int32_t> idx(static_cast<size_t>(len));
    for (int32_t i = 0; i < len; ++i) idx[i] = len - 1 - i;  // pages out of order
    kv_indices = Tensor::from_vector(idx);
    seq_lens = Tensor::from_vector(std::vector<int32_t>{len});
  }
};

TEST(Fp8KvCache, StoreQuantizesAndAttentionDequantizesWithScales) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  const int32_t len = 37;
  const int64_t hk = 2, hq = 4, d = 64;
  Tensor k = testing::random_normal(rng, {len, hk, d}, 3.0f), v = testing::random_normal(rng, {len, hk, d}, 3.0f);
  Tensor loc = Tensor::empty({len}, DType::kI64);
  for (int32_t i = 0; i < len; ++i) loc.data<int64_t>()[i] = len - 1 - i;
  const float ks = 0.02f, vs = 0.05f;
  Tensor kc = Tensor::zeros({len, hk, d}, DType::kF8E4M3), vc = Tensor::zeros({len, hk, d}, DType::kF8E4M3);
  ops::store_kv_cache(k, v, kc, vc, loc, ks, vs);
  // The reference cache: f32 values e4m3(x / scale) * scale.
  Tensor kf = Tensor::zeros({len, hk, d}, DType::kF32), vf = Tensor::zeros({len, hk, d}, DType::kF32);
  for (int64_t t = 0; t < len; ++t) {
    for (int64_t e = 0; e < hk * d; ++e) {
      const int64_t slot = len - 1 - t;
      const float kq = f8e4m3_to_f32(f32_to_f8e4m3(k.data<float>()[t * hk * d + e] / ks));
      const float vq = f8e4m3_to_f32(f32_to_f8e4m3(v.data<float>()[t * hk * d + e] / vs));
      ASSERT_EQ(static_cast<const f8e4m3*>(kc.data_ptr())[slot * hk * d + e].bits,
                f32_to_f8e4m3(k.data<float>()[t * hk * d + e] / ks).bits);
      kf.data<float>()[slot * hk * d + e] = kq * ks;
      vf.data<float>()[slot * hk * d + e] = vq * vs;
    }
  }
  for (const int32_t qo_len : {1, 9}) {
    SCOPED_TRACE(str("qo_len ", qo_len));
    KvBatch b(len, qo_len);
    Tensor q = testing::random_normal(rng, {qo_len, hq, d});
    ops::AttentionParams p;
    p.scale = 1.0f / std::sqrt(float(d));
    Tensor want = Tensor::empty({qo_len, hq, d}, DType::kF32), got = Tensor::empty({qo_len, hq, d}, DType::kF32);
    ops::paged_attention(q, kf, vf, b.qo_indptr, b.kv_indptr, b.kv_indices, b.seq_lens, 1, p, want);
    p.k_scale = ks;
    p.v_scale = vs;
    ops::paged_attention(q, kc, vc, b.qo_indptr, b.kv_indptr, b.kv_indices, b.seq_lens, 1, p, got);
    // The CPU dequantizes rows to exactly the reference cache's values: the same bits.
    for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
}

TEST(Fp8KvCache, ScalesOnlyForFp8Caches) {
  Tensor k = Tensor::zeros({1, 1, 8}, DType::kF32);
  Tensor kc = Tensor::zeros({4, 1, 8}, DType::kBF16);
  Tensor loc = Tensor::from_vector(std::vector<int64_t>{2});
  EXPECT_THROW(ops::store_kv_cache(k, k, kc, kc, loc, 0.5f, 1.0f), Error);
  Tensor fc = Tensor::zeros({4, 1, 8}, DType::kF8E4M3);
  EXPECT_THROW(ops::store_kv_cache(k, k, fc, fc, loc, 0.0f, 1.0f), Error);
  EXPECT_THROW(ops::store_kv_cache(k, k, fc, fc, loc, 1.0f, NAN), Error);
  EXPECT_NO_THROW(ops::store_kv_cache(k, k, fc, fc, loc, 0.5f, 2.0f));
}

// ---- quantization_config ----

StatusOr<QuantizationSpec> spec_of(const nlohmann::json& q) {
  ModelConfig c;
  c.raw = {{"quantization_config", q}};
  return parse_quantization_spec(c, "/nonexistent");
}

TEST(QuantizationConfig, ParsesFp8Layouts) {
  auto hf = spec_of({{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}});
  ASSERT_TRUE(hf.is_ok()) << hf.status().to_string();
  EXPECT_EQ(hf->block_n, 128);
  EXPECT_EQ(hf->block_k, 128);
  nlohmann::json args = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
  nlohmann::json act = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}};
  auto ct = spec_of({{"quant_method", "compressed-tensors"},
                     {"config_groups", {{"group_0", {{"weights", args}, {"input_activations", act}}}}}});
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  EXPECT_EQ(ct->method, "compressed-tensors");
  auto mo = spec_of({{"quant_method", "modelopt"}, {"quant_algo", "FP8"}});
  ASSERT_TRUE(mo.is_ok()) << mo.status().to_string();
}

TEST(QuantizationConfig, UnsupportedMethodsNameTheirQuantMethod) {
  for (const char* m : {"gptq", "awq", "bitsandbytes"}) {
    auto s = spec_of({{"quant_method", m}, {"bits", 4}});
    ASSERT_FALSE(s.is_ok()) << m;
    EXPECT_NE(s.status().message().find(str("'", m, "'")), std::string::npos) << s.status().to_string();
  }
  nlohmann::json int8 = {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}};
  auto ct = spec_of({{"quant_method", "compressed-tensors"}, {"config_groups", {{"g", {{"weights", int8}}}}}});
  ASSERT_FALSE(ct.is_ok());
  EXPECT_NE(ct.status().message().find("compressed-tensors"), std::string::npos) << ct.status().to_string();
  auto e5 = spec_of({{"quant_method", "fp8"}, {"fmt", "e5m2"}});
  EXPECT_FALSE(e5.is_ok());
  auto bad_block = spec_of({{"quant_method", "fp8"}, {"weight_block_size", {128}}});
  EXPECT_FALSE(bad_block.is_ok());
}

}  // namespace
}  // namespace rlm
