// Whole models from GGUF files through create_model + ModelRunner, against transformers
// (tools/make_gguf_fixtures.py for the tiny llama, tools/make_gguf_llama_reference.py for
// SmolLM2; both load the GGUF with transformers' own loader). This is where a wrong q/k
// un-permutation would show: RoPE pairs the wrong dimensions and the logits drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/model_loader.h"
#include "engine/prompt_logits.h"
#include "model/gguf_weights.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

const std::string kDataDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/gguf/";
const std::string kSmolLM2 = std::string(RADIXLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json read_json(const std::string& name) { return nlohmann::json::parse(read_all(kDataDir + name)); }

std::unique_ptr<ModelRunner> make_runner(std::unique_ptr<CausalLM> model);

// GGUF file -> config + weights -> model -> runner.
std::unique_ptr<ModelRunner> load_runner(const std::string& path) {
  auto file = GgufFile::open(path);
  RLM_CHECK(file.is_ok()) << file.status().to_string();
  auto config = gguf_model_config(**file);
  RLM_CHECK(config.is_ok()) << config.status().to_string();
  auto weights = open_gguf_weights(*file);
  RLM_CHECK(weights.is_ok()) << weights.status().to_string();
  auto model = create_model(*config, **weights);
  RLM_CHECK(model.is_ok()) << model.status().to_string();
  return make_runner(std::move(model).value());
}

// Through the scheduler, like `radixlm generate`; the runner goes to the engine.
std::vector<int32_t> greedy(std::unique_ptr<ModelRunner> runner, const std::vector<int32_t>& prompt, int64_t n) {
  auto engine = testing::engine_over(std::move(runner));
  const auto out = testing::generate_ids(*engine, {testing::greedy_request(prompt, n)});
  RLM_CHECK(out.size() == 1) << "generation failed";
  return out[0];
}

std::unique_ptr<ModelRunner> make_runner(std::unique_ptr<CausalLM> model) {
  ModelRunnerConfig rc;
  rc.max_requests = 2;
  rc.max_context_len = 128;
  auto runner = ModelRunner::create(std::move(model), rc);
  RLM_CHECK(runner.is_ok()) << runner.status().to_string();
  return std::move(runner).value();
}

class GgufTinyModel : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTinyModel, LogitsAndGreedyMatchTransformers) {
  const std::string stem = "tiny_" + GetParam();
  auto e = read_json(stem + "_expected.json");
  // Through load_model(), which recognises *.gguf files.
  auto loaded = load_model(kDataDir + stem + ".gguf");
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ASSERT_NE(loaded->gguf, nullptr);
  EXPECT_EQ(loaded->config.architecture, e["config"]["architectures"][0].get<std::string>());
  auto runner = make_runner(std::move(loaded->model));
  const auto prompt = e["prompt_ids"].get<std::vector<int32_t>>();
  const auto want = e["logits"].get<std::vector<std::vector<double>>>();
  auto logits = prompt_logits(*runner, prompt);
  ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
  ASSERT_EQ(logits->shape(), (Shape{static_cast<int64_t>(want.size()), static_cast<int64_t>(want[0].size())}));
  double max_diff = 0;
  for (size_t r = 0; r < want.size(); ++r) {
    for (size_t v = 0; v < want[r].size(); ++v) {
      max_diff = std::max(max_diff, std::fabs(logits->at<float>({static_cast<int64_t>(r), static_cast<int64_t>(v)}) - want[r][v]));
    }
  }
  EXPECT_LE(max_diff, 1e-4);
  EXPECT_EQ(greedy(std::move(runner), prompt, static_cast<int64_t>(e["greedy_ids"].size())),
            e["greedy_ids"].get<std::vector<int32_t>>());
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufTinyModel, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(GgufModel, SmolLM2LogitsAndGreedyMatchTransformers) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " not present";
  auto e = read_json("smollm2_hf_expected.json")["logits"];
  auto runner = load_runner(kSmolLM2);
  const auto prompt = e["prompt_ids"].get<std::vector<int32_t>>();
  auto logits = prompt_logits(*runner, prompt);
  ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
  const int64_t rows = static_cast<int64_t>(prompt.size()), vocab = logits->size(1);
  ASSERT_EQ(logits->size(0), rows);
  const auto argmax = e["argmax"].get<std::vector<int64_t>>();
  const auto sampled = e["sampled"].get<std::vector<std::vector<double>>>();
  const int64_t stride = e["vocab_stride"].get<int64_t>();
  double max_diff = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits->data<float>() + r * vocab;
    EXPECT_EQ(std::max_element(row, row + vocab) - row, argmax[r]) << "position " << r;
    for (size_t k = 0; k < sampled[r].size(); ++k) max_diff = std::max(max_diff, std::fabs(row[k * stride] - sampled[r][k]));
  }
  const std::string last = read_all(kDataDir + e["last_row_file"].get<std::string>());
  ASSERT_EQ(static_cast<int64_t>(last.size()), vocab * 4);
  const auto* want_last = reinterpret_cast<const float*>(last.data());
  const float* got_last = logits->data<float>() + (rows - 1) * vocab;
  for (int64_t v = 0; v < vocab; ++v) max_diff = std::max(max_diff, static_cast<double>(std::fabs(got_last[v] - want_last[v])));
  // fp32 on both sides, 30 layers of differently ordered sums (measured: ~1e-4).
  EXPECT_LE(max_diff, 1e-3);
  std::cout << "SmolLM2 GGUF: max |logit diff| vs transformers = " << max_diff << "\n";
  EXPECT_EQ(greedy(std::move(runner), prompt, static_cast<int64_t>(e["greedy_ids"].size())),
            e["greedy_ids"].get<std::vector<int32_t>>());
}

TEST(GgufModel, LoadModelFormats) {
  LoadOptions dummy;
  dummy.load_format = "dummy";
  auto d = load_model(kDataDir + "tiny_llama.gguf", dummy);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->config.num_hidden_layers, read_json("tiny_llama_expected.json")["config"]["num_hidden_layers"].get<int64_t>());
  LoadOptions st;
  st.load_format = "safetensors";
  auto bad = load_model(kDataDir + "tiny_llama.gguf", st);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto arch = load_model(kDataDir + "fixture.gguf");  // general.architecture "fixture"
  ASSERT_FALSE(arch.is_ok());
  EXPECT_EQ(arch.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace rlm
