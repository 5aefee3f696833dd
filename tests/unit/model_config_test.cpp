// parse_model_config / load_model_config against what transformers derives from the same files
// (tests/data/configs, written by tools/make_config_reference.py), plus malformed configs.
#include "model/model_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace rlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kConfigDir = fs::path(RADIXLM_SOURCE_DIR) / "tests" / "data" / "configs";

json read_json(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return json::parse(in);
}

std::optional<int64_t> optional_int(const json& v) {
  if (v.is_null()) return std::nullopt;
  return v.get<int64_t>();
}

DType expected_dtype(const json& e) {
  if (e.at("dtype").is_null()) return ModelConfig{}.dtype;
  return parse_dtype(e.at("dtype").get<std::string>()).value();
}

TEST(ModelConfig, MatchesTransformersOnReferenceConfigs) {
  const json expected = read_json(kConfigDir / "expected.json").at("cases");
  ASSERT_GE(expected.size(), 8u);
  for (const auto& [name, e] : expected.items()) {
    SCOPED_TRACE(name);
    StatusOr<ModelConfig> parsed = load_model_config((kConfigDir / name).string());
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
    const ModelConfig& c = parsed.value();
    EXPECT_EQ(c.architecture, e.at("architecture").get<std::string>());
    EXPECT_EQ(c.model_type, e.at("model_type").get<std::string>());
    EXPECT_EQ(c.vocab_size, e.at("vocab_size").get<int64_t>());
    EXPECT_EQ(c.hidden_size, e.at("hidden_size").get<int64_t>());
    EXPECT_EQ(c.intermediate_size, e.at("intermediate_size").get<int64_t>());
    EXPECT_EQ(c.num_hidden_layers, e.at("num_hidden_layers").get<int64_t>());
    EXPECT_EQ(c.num_attention_heads, e.at("num_attention_heads").get<int64_t>());
    EXPECT_EQ(c.num_key_value_heads, e.at("num_key_value_heads").get<int64_t>());
    EXPECT_EQ(c.head_dim, e.at("head_dim").get<int64_t>());
    EXPECT_EQ(c.max_position_embeddings, e.at("max_position_embeddings").get<int64_t>());
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, e.at("rms_norm_eps").get<double>());
    EXPECT_EQ(c.tie_word_embeddings, e.at("tie_word_embeddings").get<bool>());
    EXPECT_EQ(c.attention_bias, e.at("attention_bias").get<bool>());
    EXPECT_EQ(c.mlp_bias, e.at("mlp_bias").get<bool>());
    EXPECT_EQ(c.hidden_act, e.at("hidden_act").get<std::string>());
    EXPECT_EQ(c.sliding_window, e.at("sliding_window").get<int64_t>());
    EXPECT_EQ(c.layer_types, e.at("layer_types").get<std::vector<std::string>>());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      EXPECT_EQ(c.is_sliding_layer(i), e.at("layer_types")[i] == "sliding_attention") << "layer " << i;
    EXPECT_EQ(c.bos_token_id, optional_int(e.at("bos_token_id")));
    EXPECT_EQ(c.pad_token_id, optional_int(e.at("pad_token_id")));
    EXPECT_EQ(c.eos_token_ids, e.at("eos_token_ids").get<std::vector<int64_t>>());
    EXPECT_EQ(c.dtype, expected_dtype(e));
    EXPECT_EQ(c.rotary_dim(), e.at("rotary_dim").get<int64_t>());

    const json& rope = e.at("rope");
    EXPECT_EQ(c.rope.rope_type, rope.at("rope_type").get<std::string>());
    EXPECT_DOUBLE_EQ(c.rope.rope_theta, rope.at("rope_theta").get<double>());
    // Keys transformers leaves out of the rope dict keep our struct defaults.
    const RopeParameters defaults;
    auto rope_value = [&](const char* key, double fallback) {
      return rope.contains(key) ? rope.at(key).get<double>() : fallback;
    };
    EXPECT_DOUBLE_EQ(c.rope.factor, rope_value("factor", defaults.factor));
    EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, rope_value("low_freq_factor", defaults.low_freq_factor));
    EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, rope_value("high_freq_factor", defaults.high_freq_factor));
    EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor,
                     rope_value("partial_rotary_factor", defaults.partial_rotary_factor));
    if (c.rope.rope_type == "llama3") {
      EXPECT_EQ(c.rope.original_max_position_embeddings,
                rope.at("original_max_position_embeddings").get<int64_t>());
    }
    EXPECT_EQ(c.raw, read_json(kConfigDir / name / "config.json"));
  }
}

TEST(ModelConfig, LoadsAConfigFileAsWellAsADirectory) {
  StatusOr<ModelConfig> c = load_model_config((kConfigDir / "qwen3_v5" / "config.json").string());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "qwen3");
}

// A valid base config (a 4.x Llama 3.1 layout) that each case below breaks in one place.
json base_config() { return read_json(kConfigDir / "llama31_v4" / "config.json"); }

void expect_error(const json& j, StatusCode code, const std::string& needle) {
  StatusOr<ModelConfig> c = parse_model_config(j);
  ASSERT_FALSE(c.is_ok()) << "accepted: " << j.dump();
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(needle), std::string::npos)
      << "message '" << c.status().message() << "' does not mention '" << needle << "'";
}

TEST(ModelConfig, BaseConfigIsValid) { ASSERT_TRUE(parse_model_config(base_config()).is_ok()); }

TEST(ModelConfig, RejectsMissingOrNonPositiveSizes) {
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"}) {
    SCOPED_TRACE(field);
    json j = base_config();
    j.erase(field);
    expect_error(j, StatusCode::kInvalidArgument, field);
    j[field] = nullptr;
    expect_error(j, StatusCode::kInvalidArgument, field);
    j[field] = 0;
    expect_error(j, StatusCode::kInvalidArgument, field);
    j[field] = -8;
    expect_error(j, StatusCode::kInvalidArgument, field);
    j[field] = "256";
    expect_error(j, StatusCode::kInvalidArgument, field);
    j[field] = 25.5;
    expect_error(j, StatusCode::kInvalidArgument, field);
  }
  for (const char* field : {"num_key_value_heads", "head_dim", "max_position_embeddings", "sliding_window"}) {
    SCOPED_TRACE(field);
    json j = base_config();
    j[field] = -1;
    expect_error(j, StatusCode::kInvalidArgument, field);
  }
}

TEST(ModelConfig, RejectsHeadsNotDivisibleByKvHeads) {
  json j = base_config();
  j["num_key_value_heads"] = 3;  // 8 heads
  expect_error(j, StatusCode::kInvalidArgument, "num_key_value_heads");
  j = base_config();
  j["num_attention_heads"] = 6;  // hidden 256, 2 kv heads, no head_dim
  j["num_key_value_heads"] = 3;
  expect_error(j, StatusCode::kInvalidArgument, "head_dim");
}

TEST(ModelConfig, RejectsBadRope) {
  json j = base_config();
  j["rope_scaling"]["rope_type"] = "bogus";
  expect_error(j, StatusCode::kInvalidArgument, "bogus");
  j["rope_scaling"]["rope_type"] = "yarn";
  expect_error(j, StatusCode::kUnimplemented, "yarn");
  j = base_config();
  j["rope_scaling"].erase("low_freq_factor");
  expect_error(j, StatusCode::kInvalidArgument, "low_freq_factor");
  j = base_config();
  j["rope_scaling"] = {{"type", "linear"}};
  expect_error(j, StatusCode::kInvalidArgument, "factor");
  j = base_config();
  j["rope_scaling"] = "llama3";
  expect_error(j, StatusCode::kInvalidArgument, "rope_scaling");
  j = base_config();
  j["rope_theta"] = 0;
  j["rope_scaling"] = nullptr;
  expect_error(j, StatusCode::kInvalidArgument, "rope_theta");
  j = base_config();
  j["partial_rotary_factor"] = 1.5;
  expect_error(j, StatusCode::kInvalidArgument, "partial_rotary_factor");
}

TEST(ModelConfig, RejectsUnsupportedActivationAndDtype) {
  json j = base_config();
  j["hidden_act"] = "gelu_pytorch_tanh";
  expect_error(j, StatusCode::kUnimplemented, "gelu_pytorch_tanh");
  j = base_config();
  j["torch_dtype"] = "float64";
  expect_error(j, StatusCode::kUnimplemented, "torch_dtype");
  j = base_config();
  j.erase("torch_dtype");
  j["dtype"] = "int8";
  expect_error(j, StatusCode::kUnimplemented, "dtype");
}

TEST(ModelConfig, RejectsMalformedFields) {
  json j = base_config();
  j["eos_token_id"] = "</s>";
  expect_error(j, StatusCode::kInvalidArgument, "eos_token_id");
  j["eos_token_id"] = json::array({1, "x"});
  expect_error(j, StatusCode::kInvalidArgument, "eos_token_id");
  j = base_config();
  j["tie_word_embeddings"] = "yes";
  expect_error(j, StatusCode::kInvalidArgument, "tie_word_embeddings");
  j = base_config();
  j["layer_types"] = json::array({"full_attention"});  // 2 layers
  expect_error(j, StatusCode::kInvalidArgument, "layer_types");
  j = base_config();
  j["architectures"] = "LlamaForCausalLM";
  expect_error(j, StatusCode::kInvalidArgument, "architectures");
  expect_error(json::array({1, 2}), StatusCode::kInvalidArgument, "object");
  expect_error(json("config"), StatusCode::kInvalidArgument, "object");
}

TEST(ModelConfig, AcceptsEosAsIntOrListAndNegativePadAsNone) {
  json j = base_config();
  j["eos_token_id"] = 7;
  j["pad_token_id"] = -1;
  StatusOr<ModelConfig> c = parse_model_config(j);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{7});
  EXPECT_FALSE(c->pad_token_id.has_value());
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("rlm_config_test_" + std::to_string(getpid()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ModelConfig, LoadErrorsNameThePath) {
  TempDir dir;
  StatusOr<ModelConfig> c = load_model_config(dir.path().string());  // no config.json inside
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find((dir.path() / "config.json").string()), std::string::npos);

  const fs::path file = dir.path() / "config.json";
  std::ofstream(file) << "{\"hidden_size\": 12,";  // truncated JSON
  c = load_model_config(dir.path().string());
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(file.string()), std::string::npos) << c.status().message();

  std::ofstream(file) << "[1, 2, 3]";
  c = load_model_config(file.string());
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(file.string()), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("object"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace rlm
