// The real SmolLM2-135M-Instruct Q4_1 GGUF (models/, not committed; skipped when absent) against
// tools/make_gguf_llama_reference.py: the gguf package's view (reader, dequantization under GGUF
// names) and transformers' view (config, un-permuted tensors under HF names).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/gguf.h"
#include "formats/gguf_dequant.h"
#include "model/gguf_weights.h"

namespace rlm {
namespace {

const std::string kDataDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/gguf/";
const std::string kModel = std::string(RADIXLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

nlohmann::json read_json(const std::string& name) {
  std::ifstream in(kDataDir + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

class SmolLM2Gguf : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " not present";
    auto r = GgufFile::open(kModel);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    file_ = *r;
  }
  std::shared_ptr<GgufFile> file_;
};

// Compares tensor `t` with a summary written by make_gguf_llama_reference.py.
void expect_matches_summary(const Tensor& t, const nlohmann::json& e) {
  ASSERT_EQ(t.shape(), e["shape"].get<Shape>());
  const int64_t cols = t.size(-1), rows = t.numel() / cols;
  const float* x = t.data<float>();
  double sum = 0, sum_abs = 0;
  std::vector<double> row_sums(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) row_sums[r] += x[r * cols + c];
    sum += row_sums[r];
    for (int64_t c = 0; c < cols; ++c) sum_abs += std::fabs(x[r * cols + c]);
  }
  const double want_abs = e["sum_abs"].get<double>();
  EXPECT_NEAR(sum_abs, want_abs, 1e-6 * want_abs);
  EXPECT_NEAR(sum, e["sum"].get<double>(), 1e-6 * want_abs);
  if (e.contains("row_sums")) {
    const auto want = e["row_sums"].get<std::vector<double>>();
    ASSERT_EQ(want.size(), row_sums.size());
    for (size_t r = 0; r < want.size(); ++r) ASSERT_NEAR(row_sums[r], want[r], 1e-5 + 1e-6 * std::fabs(want[r])) << "row " << r;
  }
  for (const auto& [row, values] : e["rows"].items()) {
    const int64_t r = std::stoll(row);
    const auto want = values.get<std::vector<double>>();
    for (size_t c = 0; c < want.size(); ++c) {
      ASSERT_NEAR(x[r * cols + static_cast<int64_t>(c)], want[c], 1e-6 * std::fabs(want[c]) + 1e-9)
          << "row " << r << " col " << c;
    }
  }
}

TEST_F(SmolLM2Gguf, ReaderMatchesGgufPackage) {
  auto e = read_json("smollm2_expected.json");
  EXPECT_EQ(file_->version(), e["version"].get<uint32_t>());
  EXPECT_EQ(file_->tensors().size(), e["tensor_count"].get<size_t>());
  EXPECT_EQ(file_->keys().size(), e["kv_count"].get<size_t>());
  EXPECT_EQ(file_->keys(), e["keys"].get<std::vector<std::string>>());
  std::vector<std::string> names;
  for (const auto& t : file_->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, e["tensor_names"].get<std::vector<std::string>>());
  auto tokens = file_->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  EXPECT_EQ(tokens->size(), e["token_count"].get<size_t>());
  for (const auto& [id, text] : e["token_samples"].items()) EXPECT_EQ((*tokens)[std::stoul(id)], text.get<std::string>());
}

TEST_F(SmolLM2Gguf, DequantMatchesGgufPackage) {
  auto e = read_json("smollm2_expected.json");
  for (const auto& [name, summary] : e["tensors"].items()) {
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = file_->find_tensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_STREQ(ggml_type_name(info->type), summary["type"].get<std::string>().c_str());
    auto t = dequantize_tensor(*file_, *info);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    expect_matches_summary(*t, summary);
  }
}

TEST_F(SmolLM2Gguf, ConfigMatchesTransformers) {
  auto e = read_json("smollm2_hf_expected.json");
  auto c = gguf_model_config(*file_);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  const auto& want = e["config"];
  EXPECT_EQ(c->architecture, want["architectures"][0].get<std::string>());
  EXPECT_EQ(c->vocab_size, want["vocab_size"].get<int64_t>());
  EXPECT_EQ(c->hidden_size, want["hidden_size"].get<int64_t>());
  EXPECT_EQ(c->intermediate_size, want["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c->num_hidden_layers, want["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c->num_attention_heads, want["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c->num_key_value_heads, want["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c->head_dim, want["head_dim"].get<int64_t>());
  EXPECT_EQ(c->max_position_embeddings, want["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c->rms_norm_eps, want["rms_norm_eps"].get<double>());
  EXPECT_EQ(c->rope.rope_theta, want["rope_theta"].get<double>());
  EXPECT_EQ(c->rope.rope_type, want["rope_type"].get<std::string>());
  EXPECT_EQ(c->tie_word_embeddings, want["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c->bos_token_id, want["bos_token_id"].get<int64_t>());
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{want["eos_token_id"].get<int64_t>()});
  EXPECT_EQ(c->pad_token_id, want["pad_token_id"].get<int64_t>());
}

TEST_F(SmolLM2Gguf, WeightsMatchTransformers) {
  auto e = read_json("smollm2_hf_expected.json");
  auto ws = open_gguf_weights(file_);
  ASSERT_TRUE(ws.is_ok()) << ws.status().to_string();
  EXPECT_EQ((*ws)->has("lm_head.weight"), !e["lm_head_tied"].get<bool>());
  for (const auto& [name, summary] : e["tensors"].items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE((*ws)->has(name));
    auto t = (*ws)->get(name, summary["shape"].get<Shape>());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    expect_matches_summary(*t, summary);
  }
}

}  // namespace
}  // namespace rlm
