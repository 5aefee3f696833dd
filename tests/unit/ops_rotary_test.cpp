// RoPE tables against HF transformers (tests/data/rope_reference.json, written by
// tools/make_rope_reference.py) and the in-place rotation against a double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "kernels/cpu/rotary.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::random_normal;
using testing::TestRng;

constexpr double kInvFreqRelTol = 1e-6;  // per element, vs torch's f32 pow (may differ by an ulp)
constexpr double kCosSinAbsTol = 2e-6;   // per element, cos/sin of the same f32 argument

nlohmann::json load_reference() {
  const std::string path = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/rope_reference.json";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return nlohmann::json::parse(f);
}

ops::RopeConfig config_of(const nlohmann::json& c) {
  ops::RopeConfig cfg;
  cfg.rotary_dim = c["rotary_dim"].get<int64_t>();
  cfg.theta = c["theta"].get<double>();
  cfg.scaling_type = c["scaling_type"].get<std::string>();
  cfg.factor = c.value("factor", 1.0);
  cfg.low_freq_factor = c.value("low_freq_factor", 1.0);
  cfg.high_freq_factor = c.value("high_freq_factor", 4.0);
  cfg.original_max_position = c.value("original_max_position", int64_t{8192});
  return cfg;
}

TEST(OpsRope, TablesMatchTransformers) {
  const nlohmann::json ref = load_reference();
  const auto positions = ref["positions"].get<std::vector<int64_t>>();
  ASSERT_GE(ref["cases"].size(), 5u);
  for (const auto& c : ref["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const ops::RopeConfig cfg = config_of(c);
    const auto want = c["inv_freq"].get<std::vector<double>>();
    const std::vector<float> inv =
        cpu::rope_inv_freq(cfg.rotary_dim, cfg.theta, cfg.scaling_type, cfg.factor, cfg.low_freq_factor,
                           cfg.high_freq_factor, cfg.original_max_position);
    ASSERT_EQ(inv.size(), want.size());
    for (size_t i = 0; i < inv.size(); ++i) {
      EXPECT_NEAR(inv[i], want[i], kInvFreqRelTol * std::abs(want[i])) << "inv_freq[" << i << "]";
    }
    const Tensor cache = ops::make_rope_cos_sin_cache(cfg, positions.back() + 1);
    ASSERT_EQ(cache.shape(), (Shape{positions.back() + 1, cfg.rotary_dim}));
    const int64_t half = cfg.rotary_dim / 2;
    for (size_t p = 0; p < positions.size(); ++p) {
      const auto cos = c["cos"][p].get<std::vector<double>>();
      const auto sin = c["sin"][p].get<std::vector<double>>();
      for (int64_t i = 0; i < half; ++i) {
        ASSERT_NEAR(cache.at<float>({positions[p], i}), cos[i], kCosSinAbsTol) << "cos pos " << positions[p] << " i " << i;
        ASSERT_NEAR(cache.at<float>({positions[p], half + i}), sin[i], kCosSinAbsTol)
            << "sin pos " << positions[p] << " i " << i;
      }
    }
  }
}

// Rotates heads [num_tokens, heads, head_dim] in double with the cache's own cos/sin values.
std::vector<double> ref_rotate(const Tensor& x, const std::vector<int64_t>& pos, const Tensor& cache, bool neox) {
  const int64_t n = x.size(0), h = x.size(1), d = x.size(2), rot = cache.size(1), half = rot / 2;
  std::vector<double> out = testing::to_doubles(x);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < h; ++j) {
      double* r = out.data() + (t * h + j) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cache.at<float>({pos[t], i}), s = cache.at<float>({pos[t], half + i});
        const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const double x1 = r[a], x2 = r[b];
        r[a] = x1 * c - x2 * s;
        r[b] = x2 * c + x1 * s;
      }
    }
  }
  return out;
}

TEST(OpsRope, RotationMatchesReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (bool neox : {true, false}) {
    for (auto [head_dim, rot] : {std::pair<int64_t, int64_t>{64, 64}, {64, 16}, {128, 128}, {18, 10}}) {
      for (int64_t n : {1, 3, 17}) {
        const int64_t hq = 4, hk = 2, max_pos = 300;
        ops::RopeConfig cfg;
        cfg.rotary_dim = rot;
        cfg.theta = 10000.0;
        const Tensor cache = ops::make_rope_cos_sin_cache(cfg, max_pos);
        // q and k as strided views of a fused qkv buffer.
        Tensor qkv = random_normal(rng, {n, hq + 2 * hk, head_dim});
        Tensor q = qkv.slice(1, 0, hq), k = qkv.slice(1, hq, hq + hk);
        const Tensor v_before = qkv.slice(1, hq + hk, hq + 2 * hk).clone();
        std::vector<int64_t> pos(n);
        for (auto& p : pos) p = rng.randint(0, max_pos - 1);
        const auto want_q = ref_rotate(q, pos, cache, neox), want_k = ref_rotate(k, pos, cache, neox);
        const Tensor q_before = q.clone(), k_before = k.clone();
        std::vector<int32_t> pos32(pos.begin(), pos.end());
        const Tensor positions = n % 2 ? Tensor::from_vector(pos32) : Tensor::from_vector(pos);
        ops::rotary_embedding(q, k, positions, cache, neox);
        SCOPED_TRACE(rlm::str("neox ", neox, " head_dim ", head_dim, " rot ", rot, " n ", n));
        EXPECT_LE(testing::rel_l2(q, want_q), 1e-6);
        EXPECT_LE(testing::rel_l2(k, want_k), 1e-6);
        // Dims past rotary_dim and the v heads are untouched, bit for bit.
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t c = rot; c < head_dim; ++c) {
            ASSERT_EQ(q.at<float>({t, 1, c}), q_before.at<float>({t, 1, c}));
            ASSERT_EQ(k.at<float>({t, 0, c}), k_before.at<float>({t, 0, c}));
          }
        }
        EXPECT_TRUE(testing::bitwise_equal(qkv.slice(1, hq + hk, hq + 2 * hk), v_before));
      }
    }
  }
}

TEST(OpsRope, BadInputsAreErrors) {
  ops::RopeConfig cfg;
  cfg.rotary_dim = 8;
  const Tensor cache = ops::make_rope_cos_sin_cache(cfg, 10);
  Tensor q = Tensor::zeros({2, 1, 8}, DType::kF32), k = Tensor::zeros({2, 1, 8}, DType::kF32);
  std::string msg = testing::error_of([&] { ops::rotary_embedding(q, k, Tensor::from_vector<int32_t>({3, 10}), cache, true); });
  EXPECT_NE(msg.find("position 10 of token 1 is outside the cos/sin cache [0, 10)"), std::string::npos) << msg;
  cfg.scaling_type = "yarn";
  msg = testing::error_of([&] { ops::make_rope_cos_sin_cache(cfg, 10); });
  EXPECT_NE(msg.find("unsupported rope scaling type 'yarn'"), std::string::npos) << msg;
  Tensor k_bad = Tensor::zeros({2, 1, 6}, DType::kF32);
  msg = testing::error_of([&] { ops::rotary_embedding(q, k_bad, Tensor::from_vector<int32_t>({0, 1}), cache, true); });
  EXPECT_NE(msg.find("k f32[2, 1, 6] cpu: dimension 2 must be head_dim"), std::string::npos) << msg;
}

// The fused prologue (ops::rotary_store_kv_cache) checks what each of its ops checks, and its norms.
TEST(OpsRope, FusedPrologueBadInputsAreErrors) {
  ops::RopeConfig cfg;
  cfg.rotary_dim = 8;
  const Tensor cache = ops::make_rope_cos_sin_cache(cfg, 10);
  const Tensor q = Tensor::zeros({2, 2, 8}, DType::kF32), k = Tensor::zeros({2, 1, 8}, DType::kF32);
  q.fill_(1.0);  // position 1 would rotate them
  k.fill_(1.0);
  const Tensor v = Tensor::zeros({2, 1, 8}, DType::kF32);
  const Tensor kc = Tensor::zeros({4, 1, 8}, DType::kBF16), vc = Tensor::zeros({4, 1, 8}, DType::kBF16);
  const Tensor pos = Tensor::from_vector<int32_t>({0, 1}), loc = Tensor::from_vector<int32_t>({1, 2});
  const Tensor w8 = Tensor::zeros({8}, DType::kF32), w6 = Tensor::zeros({6}, DType::kF32);
  const Tensor w8h = Tensor::zeros({8}, DType::kF16);
  struct Case {
    std::function<void()> call;
    const char* error;
  };
  const Case cases[] = {
      {[&] {
         ops::rotary_store_kv_cache(q, k, v, Tensor::from_vector<int32_t>({0, 10}), cache, true, kc, vc, loc);
       },
       "position 10 of token 1 is outside the cos/sin cache [0, 10)"},
      {[&] {
         ops::rotary_store_kv_cache(q, k, v, pos, cache, true, kc, vc, Tensor::from_vector<int32_t>({1, 4}));
       },
       "out_cache_loc[1] = 4 is outside the pool [0, 4)"},
      {[&] {
         ops::rotary_store_kv_cache(q, k, v, pos, cache, true, kc, vc, loc, 1.0f, 1.0f, &w8, nullptr, 1e-6f);
       },
       "q_norm and k_norm come together"},
      {[&] {
         ops::rotary_store_kv_cache(q, k, v, pos, cache, true, kc, vc, loc, 1.0f, 1.0f, &w8, &w6, 1e-6f);
       },
       "k_norm f32[6] cpu: dimension 0 must be head_dim"},
      {[&] {
         ops::rotary_store_kv_cache(q, k, v, pos, cache, true, kc, vc, loc, 1.0f, 1.0f, &w8, &w8h, 1e-6f);
       },
       "q_norm and k_norm of different dtypes"},
      {[&] { ops::rotary_store_kv_cache(q, k, v, pos, cache, true, kc, vc, loc, 2.0f, 1.0f); },
       "apply to f8e4m3 caches only"},
  };
  const Tensor q0 = q.clone(), k0 = k.clone();
  for (const Case& c : cases) {
    const std::string msg = testing::error_of(c.call);
    EXPECT_NE(msg.find(c.error), std::string::npos) << msg;
    EXPECT_NE(msg.find("rotary_store_kv_cache"), std::string::npos) << msg;
  }
  // Nothing was modified by any of them (a bad slot is found before the rotation).
  EXPECT_EQ(std::memcmp(q.data_ptr(), q0.data_ptr(), static_cast<size_t>(q.nbytes())), 0);
  EXPECT_EQ(std::memcmp(k.data_ptr(), k0.data_ptr(), static_cast<size_t>(k.nbytes())), 0);
  // And the valid call rotates (the check above could not pass by accident).
  ops::rotary_store_kv_cache(q, k, v, pos, cache, true, kc, vc, loc);
  EXPECT_NE(std::memcmp(q.data_ptr(), q0.data_ptr(), static_cast<size_t>(q.nbytes())), 0);
}

}  // namespace
}  // namespace rlm
