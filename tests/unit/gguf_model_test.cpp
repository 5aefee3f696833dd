// Whole models from GGUF files through create_model + ModelRunner, against transformers
// (tools/make_gguf_fixtures.py for the tiny llama/qwen2/qwen3, tools/make_gguf_arch_fixtures.py for
// the tiny qwen3moe/gemma3, tools/make_gguf_llama_reference.py for
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
#include "ops/ops.h"
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

// Sets how quantized linears treat activations for one scope (ops::linear).
class ActivationMode {
 public:
  explicit ActivationMode(ops::QuantizedActivations mode) : saved_(ops::quantized_linear_activations()) {
    ops::set_quantized_linear_activations(mode);
  }
  ~ActivationMode() { ops::set_quantized_linear_activations(saved_); }

 private:
  ops::QuantizedActivations saved_;
};

// GGUF file -> config + weights (kept quantized, or dequantized to f32) -> model -> runner.
std::unique_ptr<ModelRunner> load_runner(const std::string& path, GgufWeights mode = GgufWeights::kQuantized) {
  auto file = GgufFile::open(path);
  RLM_CHECK(file.is_ok()) << file.status().to_string();
  auto config = gguf_model_config(**file);
  RLM_CHECK(config.is_ok()) << config.status().to_string();
  auto weights = open_gguf_weights(*file, DType::kF32, mode);
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

double max_abs_diff(const Tensor& a, const Tensor& b) {
  RLM_CHECK(a.shape() == b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(a.data<float>()[i]) - b.data<float>()[i]));
  return m;
}

// Index of the first differing element (size when equal).
size_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

class GgufTinyModel : public ::testing::TestWithParam<std::string> {};

// The tiny models (mixed F32/F16/BF16/Q8_0/Q4_0/Q4_1 matrices, kept in their types) through
// load_model(). Reference mode (f32 activations): transformers' logits within 1e-4 and its greedy
// tokens. Default mode (8-bit activations): logits within 0.5 of transformers (they span about
// [-11, 11]; measured 0.09-0.32 on these 32/64-wide random matrices) and the same greedy tokens.
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
  const auto want_greedy = e["greedy_ids"].get<std::vector<int32_t>>();
  Tensor want_t = Tensor::empty({static_cast<int64_t>(want.size()), static_cast<int64_t>(want[0].size())}, DType::kF32);
  for (size_t r = 0; r < want.size(); ++r)
    for (size_t v = 0; v < want[r].size(); ++v) want_t.data<float>()[r * want[r].size() + v] = static_cast<float>(want[r][v]);
  // Greedy generation takes a runner of its own (the serving engine owns it).
  auto fresh_runner = [&] {
    auto l = load_model(kDataDir + stem + ".gguf");
    RLM_CHECK(l.is_ok()) << l.status().to_string();
    return make_runner(std::move(l->model));
  };
  Tensor ref_logits;
  {
    ActivationMode mode(ops::QuantizedActivations::kF32);
    auto logits = prompt_logits(*runner, prompt);
    ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
    ASSERT_EQ(logits->shape(), want_t.shape());
    EXPECT_LE(max_abs_diff(*logits, want_t), 1e-4);
    EXPECT_EQ(greedy(fresh_runner(), prompt, static_cast<int64_t>(want_greedy.size())), want_greedy);
    ref_logits = *logits;
  }
  ActivationMode mode(ops::QuantizedActivations::kInt8);
  auto logits = prompt_logits(*runner, prompt);
  ASSERT_TRUE(logits.is_ok()) << logits.status().to_string();
  const double vs_hf = max_abs_diff(*logits, want_t), vs_ref = max_abs_diff(*logits, ref_logits);
  std::cout << stem << " 8-bit activations: max |logit diff| vs transformers " << vs_hf << ", vs f32 activations "
            << vs_ref << "\n";
  EXPECT_LE(vs_hf, 0.5);
  EXPECT_LE(vs_ref, 0.5);
  const auto got = greedy(fresh_runner(), prompt, static_cast<int64_t>(want_greedy.size()));
  std::cout << stem << " 8-bit activations: greedy tokens identical for " << first_difference(got, want_greedy)
            << " of " << want_greedy.size() << "\n";
  EXPECT_EQ(got, want_greedy);
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufTinyModel, ::testing::Values("llama", "qwen2", "qwen3", "qwen3moe", "gemma3"));

struct SmolLM2Result {
  Tensor logits;               // [prompt rows, vocab]
  std::vector<int32_t> greedy;
};

// Prompt logits and greedy tokens of SmolLM2 loaded with `weights`; the generation takes the runner.
SmolLM2Result run_smollm2(GgufWeights weights, const nlohmann::json& e) {
  const auto prompt = e["prompt_ids"].get<std::vector<int32_t>>();
  auto runner = load_runner(kSmolLM2, weights);
  auto logits = prompt_logits(*runner, prompt);
  RLM_CHECK(logits.is_ok()) << logits.status().to_string();
  return {*logits, greedy(std::move(runner), prompt, static_cast<int64_t>(e["greedy_ids"].size()))};
}

// Max |logit diff| against transformers' sampled logits and full last row; argmax per position.
double smollm2_diff_vs_transformers(const Tensor& logits, const nlohmann::json& e, int64_t* argmax_mismatches) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const auto argmax = e["argmax"].get<std::vector<int64_t>>();
  const auto sampled = e["sampled"].get<std::vector<std::vector<double>>>();
  const int64_t stride = e["vocab_stride"].get<int64_t>();
  double max_diff = 0;
  *argmax_mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data<float>() + r * vocab;
    if (std::max_element(row, row + vocab) - row != argmax[r]) ++*argmax_mismatches;
    for (size_t k = 0; k < sampled[r].size(); ++k) max_diff = std::max(max_diff, std::fabs(row[k * stride] - sampled[r][k]));
  }
  const std::string last = read_all(kDataDir + e["last_row_file"].get<std::string>());
  RLM_CHECK_EQ(static_cast<int64_t>(last.size()), vocab * 4);
  const auto* want_last = reinterpret_cast<const float*>(last.data());
  const float* got_last = logits.data<float>() + (rows - 1) * vocab;
  for (int64_t v = 0; v < vocab; ++v) max_diff = std::max(max_diff, static_cast<double>(std::fabs(got_last[v] - want_last[v])));
  return max_diff;
}

// SmolLM2-135M Q4_1 with its matrices kept quantized. f32 activations (reference mode): within
// 1e-3 of transformers (fp32 on both sides, 30 layers of differently ordered sums; measured ~1e-4)
// and the same greedy tokens. 8-bit activations (the default): see the tolerances below.
TEST(GgufModel, SmolLM2LogitsAndGreedyMatchTransformers) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " not present";
  auto e = read_json("smollm2_hf_expected.json")["logits"];
  const auto want_greedy = e["greedy_ids"].get<std::vector<int32_t>>();
  int64_t mismatches = 0;
  SmolLM2Result ref;
  {
    ActivationMode mode(ops::QuantizedActivations::kF32);
    ref = run_smollm2(GgufWeights::kQuantized, e);
    const double diff = smollm2_diff_vs_transformers(ref.logits, e, &mismatches);
    std::cout << "SmolLM2 GGUF, f32 activations: max |logit diff| vs transformers = " << diff << "\n";
    EXPECT_LE(diff, 1e-3);
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(ref.greedy, want_greedy);
  }
  ActivationMode mode(ops::QuantizedActivations::kInt8);
  const SmolLM2Result q = run_smollm2(GgufWeights::kQuantized, e);
  const double diff = smollm2_diff_vs_transformers(q.logits, e, &mismatches);
  const double vs_ref = max_abs_diff(q.logits, ref.logits);
  double mean = 0;
  for (int64_t i = 0; i < q.logits.numel(); ++i) mean += std::fabs(q.logits.data<float>()[i] - ref.logits.data<float>()[i]);
  mean /= static_cast<double>(q.logits.numel());
  std::cout << "SmolLM2 GGUF, 8-bit activations: max |logit diff| vs transformers = " << diff
            << ", vs f32 activations = " << vs_ref << " (mean " << mean << "), argmax mismatches " << mismatches
            << " of " << q.logits.size(0) << " positions\n";
  // Logits span ~[-20, 30]. SmolLM2's activations have outliers of a few hundred, so a 32-value
  // block holding one quantizes its neighbours coarsely (as llama.cpp's Q8 activations do):
  // measured max 1.3 vs transformers, 1.9 vs f32 activations, mean 0.23, 1 argmax of 37 differs
  // (AVX2 kernels; an earlier version measured 2.3 / 2.6 / 0.26).
  EXPECT_LE(diff, 3.5);
  EXPECT_LE(vs_ref, 3.5);
  EXPECT_LE(mean, 0.4);
  EXPECT_LE(mismatches, 3);
  // Greedy decoding. After the prompt, transformers' top two tokens are 504 ("The", 25.33) and 60
  // (25.24): a 0.08 margin, far inside the error above, so 8-bit activations may pick 60 (an
  // earlier version of the kernels did; the current AVX2 ones match all 16 tokens). Anything else
  // (a divergence later, or at the first step to a token outside transformers' top two) fails.
  const size_t first = first_difference(q.greedy, want_greedy);
  std::cout << "SmolLM2 GGUF, 8-bit activations: greedy tokens identical for " << first << " of "
            << want_greedy.size() << (first < want_greedy.size() ? str(" (step ", first, ": ", q.greedy[first],
                                                                          " instead of ", want_greedy[first], ")")
                                                                    : std::string()) << "\n";
  if (first < want_greedy.size()) {
    ASSERT_EQ(first, 0u) << "8-bit activations diverge from transformers after the first token";
    const std::string last = read_all(kDataDir + e["last_row_file"].get<std::string>());
    const auto* hf = reinterpret_cast<const float*>(last.data());
    EXPECT_LT(std::fabs(hf[q.greedy[0]] - hf[want_greedy[0]]), 0.1) << "not a near-tie in transformers' logits";
  }
}

// The dequantized-f32 path (every tensor f32 at load) against the kept-quantized reference mode.
TEST(GgufModel, SmolLM2DequantizedPathMatchesQuantizedReferenceMode) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " not present";
  auto e = read_json("smollm2_hf_expected.json")["logits"];
  ActivationMode mode(ops::QuantizedActivations::kF32);
  const SmolLM2Result a = run_smollm2(GgufWeights::kDequantized, e);
  const SmolLM2Result b = run_smollm2(GgufWeights::kQuantized, e);
  // Both run sgemm on the same f32 weight rows in the same 256-row blocks.
  EXPECT_LE(max_abs_diff(a.logits, b.logits), 1e-4);
  EXPECT_EQ(a.greedy, b.greedy);
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
