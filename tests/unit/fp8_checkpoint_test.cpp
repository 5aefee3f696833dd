// Published FP8 checkpoint layouts load as they are: the fixtures of tools/make_fp8_fixtures.py
// (Hugging Face fp8 block scales, compressed-tensors per-channel/per-tensor with dynamic/static
// input scales and KV scales, ModelOpt) against transformers on the dequantized weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/prompt_logits.h"
#include "unit/golden_test_util.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using testing::read_f32;
using testing::read_json;

const std::string kFixtureDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/fp8";

std::vector<std::string> fixtures() {
  std::vector<std::string> out;
  const nlohmann::json index = read_json(kFixtureDir + "/index.json");
  for (const auto& n : index["fixtures"]) out.push_back(n.get<std::string>());
  return out;
}

// Max |logits - reference| over the fixture's prompts with the given activations and KV dtype.
float max_diff(const std::string& dir, ops::Fp8Activations act, DType kv_dtype) {
  auto loaded = load_model(dir);
  RLM_CHECK(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.max_requests = 1;
  rc.max_context_len = 64;
  rc.kv_dtype = kv_dtype;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  RLM_CHECK(runner.is_ok()) << runner.status().to_string();
  ops::set_fp8_linear_activations(act);
  float diff = 0.0f;
  const nlohmann::json reference = read_json(dir + "/reference.json");
  for (const auto& c : reference["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const int64_t rows = c["logits_shape"][0].get<int64_t>(), vocab = c["logits_shape"][1].get<int64_t>();
    const std::vector<float> want = read_f32(dir + "/" + c["logits_file"].get<std::string>(), rows * vocab);
    auto logits = prompt_logits(**runner, prompt);
    RLM_CHECK(logits.is_ok()) << logits.status().to_string();
    RLM_CHECK(logits->numel() == rows * vocab) << logits->describe();
    for (int64_t i = 0; i < rows * vocab; ++i) {
      const float g = logits->data<float>()[i];
      diff = std::max(diff, std::isfinite(g) ? std::abs(g - want[i]) : INFINITY);
    }
  }
  ops::set_fp8_linear_activations(ops::Fp8Activations::kFp8);
  return diff;
}

void check_fixture(const std::string& name) {
  SCOPED_TRACE(name);
  const std::string dir = kFixtureDir + "/" + name;
  // f32 activations multiply the dequantized weights, which is what the reference computes: the
  // golden tolerance of the fp32 models.
  const float exact = max_diff(dir, ops::Fp8Activations::kF32, DType::kF32);
  EXPECT_LE(exact, 1e-4f) << "dequantized-weight path";
  // FP8 activations (dynamic per token / per 64-column group, or the checkpoint's static scales):
  // approximate, stated in docs/design/fp8.md.
  const float fp8 = max_diff(dir, ops::Fp8Activations::kFp8, DType::kF32);
  // And with the FP8 KV cache at the checkpoint's per-layer scales (1 where it has none).
  const float fp8_kv = max_diff(dir, ops::Fp8Activations::kFp8, DType::kF8E4M3);
  std::printf("[fp8 checkpoint] %-26s max |logit diff|: dequantized %.2e  fp8 activations %.4f  + fp8 kv %.4f\n",
              name.c_str(), exact, fp8, fp8_kv);
  EXPECT_LE(fp8, 3.0f);
  EXPECT_LE(fp8_kv, 3.0f);
}

TEST(Fp8CheckpointLoad, EveryLayoutMatchesTransformersOnDequantizedWeights) {
  const std::vector<std::string> names = fixtures();
  ASSERT_EQ(names.size(), 4u);
  for (const std::string& name : names) check_fixture(name);
}

TEST(Fp8CheckpointLoad, KvScalesComeFromTheCheckpoint) {
  for (const char* name : {"llama_ct_tensor_static", "llama_modelopt"}) {
    auto loaded = load_model(kFixtureDir + "/" + name);
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    const std::vector<KvScales> s = loaded->model->kv_scales();
    ASSERT_EQ(s.size(), 2u) << name;
    for (const KvScales& k : s) {
      EXPECT_NE(k.k, 1.0f) << name;
      EXPECT_NE(k.v, 1.0f) << name;
    }
  }
  auto dynamic = load_model(kFixtureDir + "/llama_ct_channel_dynamic");
  ASSERT_TRUE(dynamic.is_ok());
  for (const KvScales& k : dynamic->model->kv_scales()) EXPECT_EQ(k.k, 1.0f);
}

// Copies a fixture with an edited config.json into a temporary directory.
std::string edited_copy(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  namespace fs = std::filesystem;
  const fs::path dst = fs::temp_directory_path() / ("rlm_fp8_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dst);
  fs::create_directories(dst);
  fs::copy(kFixtureDir + "/" + name + "/model.safetensors", dst / "model.safetensors");
  nlohmann::json cfg = read_json(kFixtureDir + "/" + name + "/config.json");
  edit(cfg);
  std::ofstream(dst / "config.json") << cfg.dump();
  return dst.string();
}

TEST(Fp8CheckpointLoad, UnsupportedLayoutsGetAClearError) {
  const std::string gptq = edited_copy("llama_ct_channel_dynamic", [](nlohmann::json& c) {
    c["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  });
  auto bad = load_model(gptq);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'gptq'"), std::string::npos) << bad.status().to_string();
  // Block scales whose block size does not fit the stored scale tensors.
  const std::string block = edited_copy("qwen3_fp8_block", [](nlohmann::json& c) {
    c["quantization_config"]["weight_block_size"] = {32, 32};
  });
  auto mismatch = load_model(block);
  ASSERT_FALSE(mismatch.is_ok());
  EXPECT_NE(mismatch.status().message().find("weight_scale_inv"), std::string::npos) << mismatch.status().to_string();
  std::filesystem::remove_all(gptq);
  std::filesystem::remove_all(block);
}

}  // namespace
}  // namespace rlm
