// FP8 accuracy on the tiny goldens (tests/golden, made by tools/make_golden.py): FP8 weights
// (--quantization fp8), FP8 KV cache (--kv-cache-dtype fp8_e4m3) and both, against the fp32
// transformers reference. Reports, per model and variant, the largest prompt-logit difference and
// the greedy agreement: the share of the 32 golden greedy steps whose token is also our argmax when
// the model is fed the golden tokens before it (teacher forcing, so one early divergence does not
// decide the rest). docs/design/fp8.md quotes these numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/prompt_logits.h"
#include "unit/golden_test_util.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

using testing::read_f32;
using testing::read_json;

const std::string kGoldenDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden";

// The goldens of the architectures FP8 projections run in: the Llama family (Llama, Mistral, Qwen2,
// Qwen3), Qwen3-MoE (attention projections and experts quantized, the router float) and Gemma 3
// (text model and the text model of Gemma3ForConditionalGeneration).
std::vector<std::string> fp8_goldens() {
  std::vector<std::string> out;
  const nlohmann::json index = read_json(kGoldenDir + "/index.json");
  for (const auto& n : index["models"]) {
    const std::string name = n.get<std::string>();
    const std::string type = read_json(kGoldenDir + "/" + name + "/config.json").value("model_type", "");
    for (const char* t : {"llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma3_text", "gemma3"}) {
      if (type == t) out.push_back(name);
    }
  }
  return out;
}

struct Variant {
  const char* name;
  bool fp8_weights, fp8_kv;
};

struct Accuracy {
  float max_logit_diff = 0.0f;  // over the prompt rows
  int agree = 0, steps = 0;     // teacher-forced greedy steps
};

// A CPU runner for the model at `path` in variant `v`.
std::unique_ptr<ModelRunner> runner_for(const std::string& path, const Variant& v, int64_t max_requests,
                                        int64_t context_len) {
  LoadOptions lo;
  if (v.fp8_weights) lo.quantization = "fp8";
  lo.gguf_keep_quantized = false;  // a GGUF file's reference: its dequantized f32 weights
  auto loaded = load_model(path, lo);
  RLM_CHECK(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.max_requests = max_requests;
  rc.max_context_len = context_len;
  rc.kv_dtype = v.fp8_kv ? DType::kF8E4M3 : DType::kF32;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  RLM_CHECK(runner.is_ok()) << runner.status().to_string();
  return std::move(runner).value();
}

Accuracy measure(const std::string& dir, const Variant& v) {
  auto runner = runner_for(dir, v, 1, 192);
  Accuracy acc;
  const nlohmann::json golden = read_json(dir + "/golden.json");
  for (const auto& c : golden["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    const int64_t rows = c["logits_shape"][0].get<int64_t>(), vocab = c["logits_shape"][1].get<int64_t>();
    const std::vector<float> want = read_f32(dir + "/" + c["logits_file"].get<std::string>(), rows * vocab);
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), greedy.begin(), greedy.end() - 1);
    auto logits = prompt_logits(*runner, ids);
    RLM_CHECK(logits.is_ok()) << logits.status().to_string();
    const float* got = logits->data<float>();
    for (int64_t i = 0; i < rows * vocab; ++i) acc.max_logit_diff = std::max(acc.max_logit_diff, std::abs(got[i] - want[i]));
    for (size_t s = 0; s < greedy.size(); ++s) {
      const float* row = got + (prompt.size() - 1 + s) * vocab;
      const int64_t arg = std::max_element(row, row + vocab) - row;
      acc.agree += arg == greedy[s];
      ++acc.steps;
    }
  }
  return acc;
}

void check_golden(const std::string& name) {
  SCOPED_TRACE(name);
  const std::string dir = kGoldenDir + "/" + name;
  // The f32 baseline itself: exact agreement (the golden test's tolerance) validates the harness.
  const Accuracy base = measure(dir, {"f32", false, false});
  EXPECT_EQ(base.agree, base.steps);
  EXPECT_LE(base.max_logit_diff, 1e-4f);
  for (const Variant v : {Variant{"fp8 weights", true, false}, Variant{"fp8 kv", false, true},
                          Variant{"fp8 weights + kv", true, true}}) {
    const Accuracy a = measure(dir, v);
    const double share = double(a.agree) / a.steps;
    std::printf("[fp8 accuracy] %-34s %-17s greedy agreement %3d/%3d = %.3f  max |logit diff| %.4f\n",
                name.c_str(), v.name, a.agree, a.steps, share, a.max_logit_diff);
    // Tolerances, not expected values: E4M3 keeps 3 mantissa bits, and these tiny random models
    // have large logits (std 1.7-3.4) with small top-1/top-2 gaps, so FP8 moves logits by a few
    // units and flips a third of the near-ties (docs/design/fp8.md has the measured numbers); a
    // broken kernel agrees on about 1/vocab of the steps.
    EXPECT_GE(share, 0.55) << v.name;
    EXPECT_LE(a.max_logit_diff, 8.0f) << v.name;
    EXPECT_TRUE(std::isfinite(a.max_logit_diff)) << v.name;
  }
}

TEST(Fp8Accuracy, TinyGoldensAgainstTheFp32Reference) {
  const std::vector<std::string> names = fp8_goldens();
  ASSERT_GE(names.size(), 14u);
  for (const std::string& name : names) check_golden(name);
}

// SmolLM2-135M-Instruct (the Q4_1 GGUF in models/, skipped when absent): the f32 model (its
// dequantized weights) gives the reference greedy tokens (32 steps through the engine) and logits;
// FP8 weights (quantized from those f32 weights), FP8 KV and both are scored teacher-forced as above.
TEST(Fp8Accuracy, SmolLM2AgainstItsF32Model) {
  const std::string path = std::string(RADIXLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  // Prompts: seeded random token ids (inputs, not expected values).
  std::mt19937 rng(2024);
  std::vector<std::vector<int32_t>> prompts;
  for (const int len : {8, 16, 32, 48}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(rng() % 49152));
    prompts.push_back(p);
  }
  std::vector<OfflineRequest> reqs;
  for (const auto& p : prompts) reqs.push_back(testing::greedy_request(p, 32));
  auto engine = testing::engine_over(runner_for(path, {"f32", false, false}, 4, 128));
  const std::vector<std::vector<int32_t>> greedy = testing::generate_ids(*engine, reqs);
  ASSERT_EQ(greedy.size(), prompts.size());
  engine.reset();
  auto reference = runner_for(path, {"f32", false, false}, 4, 128);
  std::vector<Tensor> ref_logits;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> ids = prompts[i];
    ids.insert(ids.end(), greedy[i].begin(), greedy[i].end() - 1);
    auto l = prompt_logits(*reference, ids);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    ref_logits.push_back(*l);
  }
  for (const Variant v : {Variant{"fp8 weights", true, false}, Variant{"fp8 kv", false, true},
                          Variant{"fp8 weights + kv", true, true}}) {
    auto runner = runner_for(path, v, 4, 128);
    Accuracy a;
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> ids = prompts[i];
      ids.insert(ids.end(), greedy[i].begin(), greedy[i].end() - 1);
      auto l = prompt_logits(*runner, ids);
      ASSERT_TRUE(l.is_ok()) << l.status().to_string();
      const int64_t vocab = l->size(1);
      for (int64_t j = 0; j < l->numel(); ++j) {
        a.max_logit_diff = std::max(a.max_logit_diff, std::abs(l->data<float>()[j] - ref_logits[i].data<float>()[j]));
      }
      for (size_t s = 0; s < greedy[i].size(); ++s) {
        const float* row = l->data<float>() + (prompts[i].size() - 1 + s) * vocab;
        a.agree += (std::max_element(row, row + vocab) - row) == greedy[i][s];
        ++a.steps;
      }
    }
    const double share = double(a.agree) / a.steps;
    std::printf("[fp8 accuracy] %-34s %-17s greedy agreement %3d/%3d = %.3f  max |logit diff| %.4f\n",
                "SmolLM2-135M (Q4_1 -> f32)", v.name, a.agree, a.steps, share, a.max_logit_diff);
    EXPECT_GE(share, 0.75) << v.name;
    EXPECT_TRUE(std::isfinite(a.max_logit_diff)) << v.name;
  }
}

TEST(Fp8Load, QuantizationFp8IsRejectedForOtherArchitecturesAndUnknownMethods) {
  LoadOptions lo;
  lo.quantization = "int4";
  auto bad = load_model(kGoldenDir + "/llama_gqa1_hd64", lo);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos) << bad.status().to_string();
  const nlohmann::json index = read_json(kGoldenDir + "/index.json");
  for (const auto& n : index["models"]) {
    const std::string name = n.get<std::string>();
    const nlohmann::json config = read_json(kGoldenDir + "/" + name + "/config.json");
    const std::string type = config.value("model_type", "");
    if (type != "qwen3_next") continue;
    lo.quantization = "fp8";
    auto refused = load_model(kGoldenDir + "/" + name, lo);
    ASSERT_FALSE(refused.is_ok()) << name;
    EXPECT_NE(refused.status().message().find(config["architectures"][0].get<std::string>()),
              std::string::npos)
        << refused.status().to_string();
  }
}

}  // namespace
}  // namespace rlm
