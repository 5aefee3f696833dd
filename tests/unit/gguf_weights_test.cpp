// gguf_model_config / open_gguf_weights on a tiny random llama GGUF, against what transformers
// makes of the same file (tools/make_gguf_fixtures.py: AutoConfig + load_gguf_checkpoint).
#include "model/gguf_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "formats/gguf_dequant.h"
#include "unit/gguf_test_util.h"

namespace rlm {
namespace {

const std::string kDataDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/gguf/";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& name) { return nlohmann::json::parse(read_all(kDataDir + name)); }

std::shared_ptr<GgufFile> open_fixture(const std::string& name) {
  auto r = GgufFile::open(kDataDir + name);
  RLM_CHECK(r.is_ok()) << r.status().to_string();
  return *r;
}

// Compares a ModelConfig with the config transformers derived from the same GGUF.
void expect_config_matches(const ModelConfig& c, const nlohmann::json& e) {
  EXPECT_EQ(c.architecture, e["architectures"][0].get<std::string>());
  EXPECT_EQ(c.raw["model_type"].get<std::string>(), c.model_type);
  EXPECT_EQ(c.model_type, e["model_type"].get<std::string>());
  EXPECT_EQ(c.vocab_size, e["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.hidden_size, e["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, e["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.num_hidden_layers, e["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.num_attention_heads, e["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_key_value_heads, e["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, e["head_dim"].get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, e["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, e["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.rope.rope_theta, e["rope_theta"].get<double>());
  EXPECT_EQ(c.rope.rope_type, e["rope_type"].get<std::string>());
  EXPECT_EQ(c.rope.partial_rotary_factor, 1.0);
  EXPECT_EQ(c.tie_word_embeddings, e["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.bos_token_id, e["bos_token_id"].get<int64_t>());
  ASSERT_FALSE(c.eos_token_ids.empty());
  EXPECT_EQ(c.eos_token_ids[0], e["eos_token_id"].get<int64_t>());
  EXPECT_EQ(c.pad_token_id, e["pad_token_id"].get<int64_t>());
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(c.raw["hidden_size"].get<int64_t>(), c.hidden_size);
  EXPECT_EQ(c.raw["architectures"][0].get<std::string>(), c.architecture);
}

// Tiny random models of each supported architecture (tiny_<arch>.gguf).
class GgufTiny : public ::testing::TestWithParam<std::string> {
 protected:
  std::string stem() const { return "tiny_" + GetParam(); }
};

TEST_P(GgufTiny, ConfigMatchesTransformers) {
  auto f = open_fixture(stem() + ".gguf");
  auto c = gguf_model_config(*f);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  expect_config_matches(*c, read_json(stem() + "_expected.json")["config"]);
}

TEST_P(GgufTiny, TensorsMatchTransformers) {
  auto e = read_json(stem() + "_expected.json");
  const std::string blob = read_all(kDataDir + stem() + "_expected.bin");
  const auto* values = reinterpret_cast<const float*>(blob.data());
  auto ws = open_gguf_weights(open_fixture(stem() + ".gguf"));
  ASSERT_TRUE(ws.is_ok()) << ws.status().to_string();
  std::set<std::string> want_names;
  for (const auto& t : e["tensors"]) {
    const std::string name = t["name"];
    want_names.insert(name);
    SCOPED_TRACE(name);
    const Shape shape = t["shape"].get<Shape>();
    ASSERT_TRUE((*ws)->has(name));
    auto got = (*ws)->get(name, shape);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(got->dtype(), DType::kF32);
    ASSERT_EQ(got->shape(), shape);
    const float* want = values + t["offset"].get<int64_t>();
    ASSERT_LE((t["offset"].get<size_t>() + got->numel()) * 4, blob.size());
    for (int64_t i = 0; i < got->numel(); ++i) {
      ASSERT_NEAR(got->data<float>()[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-7) << "element " << i;
    }
  }
  auto names = (*ws)->names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want_names);
  EXPECT_NE((*ws)->describe().find(stem() + ".gguf"), std::string::npos);
}

// Kept quantized: matrices in their stored dtype (views of the file unless un-permuted), whose
// dequantization is bit-identical to the dequantized source; vectors and F32 matrices in f32.
TEST_P(GgufTiny, QuantizedMatricesDequantizeToTheSameTensors) {
  auto e = read_json(stem() + "_expected.json");
  auto f = open_fixture(stem() + ".gguf");
  auto deq = open_gguf_weights(f).value();
  auto q = open_gguf_weights(f, DType::kF32, GgufWeights::kQuantized).value();
  std::set<DType> seen;
  for (const auto& t : e["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    const Shape shape = t["shape"].get<Shape>();
    Tensor want = deq->get(name, shape).value();
    Tensor got = q->get(name, shape).value();
    ASSERT_EQ(got.shape(), shape);
    seen.insert(got.dtype());
    if (shape.size() == 1) {
      EXPECT_EQ(got.dtype(), DType::kF32);
    }
    Tensor back = dequantize(got);
    ASSERT_EQ(std::memcmp(back.data_ptr(), want.data_ptr(), want.nbytes()), 0);
  }
  EXPECT_GE(seen.size(), 3u);  // f32 plus stored 16-bit / block types
  EXPECT_FALSE(open_gguf_weights(f, DType::kBF16, GgufWeights::kQuantized).is_ok());
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufTiny, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(GgufWeights, GetChecksNameAndShape) {
  auto ws = open_gguf_weights(open_fixture("tiny_llama.gguf")).value();
  auto missing = ws->get("model.layers.7.mlp.up_proj.weight", {64, 64});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("model.layers.7.mlp.up_proj.weight"), std::string::npos);
  EXPECT_FALSE(ws->has("model.layers.7.mlp.up_proj.weight"));
  auto wrong = ws->get("model.layers.0.self_attn.k_proj.weight", {64, 64});
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("[32, 64]"), std::string::npos) << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("[64, 64]"), std::string::npos) << wrong.status().message();
}

TEST(GgufWeights, ServesBf16AndF16) {
  auto e = read_json("tiny_llama_expected.json");
  auto f = open_fixture("tiny_llama.gguf");
  auto ws32 = open_gguf_weights(f).value();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto ws = open_gguf_weights(f, dtype).value();
    for (const auto& t : e["tensors"]) {
      const std::string name = t["name"];
      SCOPED_TRACE(name);
      const Shape shape = t["shape"].get<Shape>();
      Tensor want = ws32->get(name, shape).value().to(dtype);
      Tensor got = ws->get(name, shape).value();
      ASSERT_EQ(got.dtype(), dtype);
      ASSERT_EQ(got.shape(), shape);
      ASSERT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), got.nbytes()), 0);
    }
  }
  auto bad = open_gguf_weights(f, DType::kI32);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

// The llama.cpp converter's permutation, written out element by element.
Tensor llama_cpp_permute(const Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), cols = w.dim() == 2 ? w.size(1) : 1, hd = rows / heads;
  Tensor out = Tensor::empty(w.shape(), DType::kF32);
  // HF row h*hd + p*hd/2 + i is stored at h*hd + 2*i + p.
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t col = 0; col < cols; ++col)
          out.data<float>()[(h * hd + 2 * i + p) * cols + col] = w.data<float>()[(h * hd + p * hd / 2 + i) * cols + col];
  return out;
}

TEST(GgufWeights, UnpermuteInvertsLlamaCppPermute) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (Shape shape : {Shape{48, 5}, Shape{48}, Shape{8, 3}}) {
    for (int64_t heads : {1, 2, 3}) {
      if (shape[0] % (2 * heads) != 0) continue;
      Tensor w = Tensor::empty(shape, DType::kF32);
      for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = dist(rng);
      Tensor back = unpermute_llama_qk(llama_cpp_permute(w, heads), heads);
      for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(back.data<float>()[i], w.data<float>()[i]) << heads;
    }
  }
}

TEST(GgufWeights, Llama3RopeFromRopeFreqs) {
  auto e = read_json("tiny_llama3_rope_expected.json")["rope_parameters"];
  auto c = gguf_model_config(*open_fixture("tiny_llama3_rope.gguf"));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->rope.rope_type, e["rope_type"].get<std::string>());
  EXPECT_NEAR(c->rope.factor, e["factor"].get<double>(), 1e-6);
  EXPECT_EQ(c->rope.low_freq_factor, e["low_freq_factor"].get<double>());
  EXPECT_EQ(c->rope.high_freq_factor, e["high_freq_factor"].get<double>());
  EXPECT_EQ(c->rope.original_max_position_embeddings, e["original_max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c->rope.rope_theta, e["rope_theta"].get<double>());
  EXPECT_EQ(c->raw["rope_scaling"]["rope_type"].get<std::string>(), "llama3");

  auto bad = gguf_model_config(*open_fixture("tiny_llama3_rope_bad.gguf"));
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.status().message().find("rope_freqs.weight"), std::string::npos) << bad.status().message();
}

TEST(GgufWeights, UnsupportedArchitecture) {
  auto f = open_fixture("fixture.gguf");  // general.architecture = "fixture"
  auto c = gguf_model_config(*f);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(c.status().message().find("'fixture'"), std::string::npos) << c.status().message();
  auto ws = open_gguf_weights(f);
  ASSERT_FALSE(ws.is_ok());
  EXPECT_EQ(ws.status().code(), StatusCode::kUnimplemented);
}

// A metadata-only llama file: every required key, minus `skip`, plus `extra`.
std::string llama_metadata(const std::string& skip, int extra_count = 0,
                           const std::function<void(gguf_test::Builder&)>& extra = nullptr) {
  gguf_test::Builder b;
  std::vector<std::pair<std::string, uint32_t>> ints = {
      {"llama.context_length", 128}, {"llama.embedding_length", 64}, {"llama.block_count", 2},
      {"llama.feed_forward_length", 96}, {"llama.attention.head_count", 4}, {"llama.attention.head_count_kv", 2},
      {"llama.vocab_size", 50}};
  int n = 3 + extra_count;  // architecture, rms eps, freq base
  for (const auto& [k, v] : ints) n += k != skip;
  b.header(0, static_cast<uint64_t>(n - (skip == "llama.attention.layer_norm_rms_epsilon")));
  b.kv_str("general.architecture", "llama");
  for (const auto& [k, v] : ints) {
    if (k != skip) b.kv_u32(k, v);
  }
  if (skip != "llama.attention.layer_norm_rms_epsilon") b.kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.kv_f32("llama.rope.freq_base", 10000.0f);
  if (extra) extra(b);
  return b.bytes();
}

StatusOr<ModelConfig> config_of(const std::string& bytes) {
  auto f = gguf_test::open_bytes(bytes);
  if (!f.is_ok()) return f.status();
  return gguf_model_config(**f);
}

TEST(GgufWeights, ConfigFromMinimalMetadata) {
  auto c = config_of(llama_metadata(""));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->vocab_size, 50);  // llama.vocab_size (no token_embd.weight, no token list)
  EXPECT_EQ(c->head_dim, 16);    // embedding_length / head_count
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->bos_token_id.has_value());
  EXPECT_TRUE(c->eos_token_ids.empty());
  // head_count_kv defaults to head_count.
  auto mha = config_of(llama_metadata("llama.attention.head_count_kv"));
  ASSERT_TRUE(mha.is_ok()) << mha.status().to_string();
  EXPECT_EQ(mha->num_key_value_heads, 4);
}

TEST(GgufWeights, ConfigErrorsNameTheKey) {
  for (const std::string key : {"llama.context_length", "llama.embedding_length", "llama.block_count",
                                "llama.feed_forward_length", "llama.attention.head_count",
                                "llama.attention.layer_norm_rms_epsilon"}) {
    auto c = config_of(llama_metadata(key));
    ASSERT_FALSE(c.is_ok()) << key;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().to_string();
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().message();
  }
  auto bad_kv = config_of(llama_metadata("llama.attention.head_count_kv", 1,
                                         [](gguf_test::Builder& b) { b.kv_u32("llama.attention.head_count_kv", 3); }));
  ASSERT_FALSE(bad_kv.is_ok());
  EXPECT_NE(bad_kv.status().message().find("does not divide"), std::string::npos) << bad_kv.status().message();
  auto yarn = config_of(llama_metadata("", 1, [](gguf_test::Builder& b) { b.kv_str("llama.rope.scaling.type", "yarn"); }));
  ASSERT_FALSE(yarn.is_ok());
  EXPECT_EQ(yarn.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(yarn.status().message().find("yarn"), std::string::npos);
  auto bad_eos = config_of(llama_metadata("", 1, [](gguf_test::Builder& b) { b.kv_u32("tokenizer.ggml.eos_token_id", 50); }));
  ASSERT_FALSE(bad_eos.is_ok());
  EXPECT_NE(bad_eos.status().message().find("tokenizer.ggml.eos_token_id"), std::string::npos);
  auto linear = config_of(llama_metadata("", 2, [](gguf_test::Builder& b) {
    b.kv_str("llama.rope.scaling.type", "linear").kv_f32("llama.rope.scaling.factor", 4.0f);
  }));
  ASSERT_TRUE(linear.is_ok()) << linear.status().to_string();
  EXPECT_EQ(linear->rope.rope_type, "linear");
  EXPECT_EQ(linear->rope.factor, 4.0);
  auto partial = config_of(llama_metadata("", 1, [](gguf_test::Builder& b) { b.kv_u32("llama.rope.dimension_count", 8); }));
  ASSERT_TRUE(partial.is_ok()) << partial.status().to_string();
  EXPECT_EQ(partial->rope.partial_rotary_factor, 0.5);
}

}  // namespace
}  // namespace rlm
