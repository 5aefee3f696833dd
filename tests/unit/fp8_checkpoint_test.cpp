// Published FP8 checkpoint layouts load as they are: the fixtures of tools/make_fp8_fixtures.py
// (Hugging Face fp8 block scales, dense and Qwen3-MoE with per-expert FP8 experts, compressed-tensors
// per-channel/per-tensor with dynamic/static input scales and KV scales, ModelOpt) against
// transformers on the dequantized weights; and load_sparse_moe's FP8 experts (stacked scales,
// --quantization fp8 on every expert layout, the refused combinations) on in-memory tensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/prompt_logits.h"
#include "model/moe.h"
#include "ops/ops.h"
#include "unit/golden_test_util.h"

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
  ASSERT_EQ(names.size(), 5u);
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

// Tensors by name, for load_sparse_moe.
class MapSource final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  bool has(const std::string& name) const override { return tensors.count(name) > 0; }
  StatusOr<Tensor> get(const std::string& name, const Shape& shape) override {
    const auto it = tensors.find(name);
    if (it == tensors.end()) return not_found(str(name, " is missing"));
    if (it->second.shape() != shape) {
      return invalid_argument(str(name, " is ", it->second.describe(), ", not ", shape_to_string(shape)));
    }
    return it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, t] : tensors) out.push_back(name);
    return out;
  }
  std::string describe() const override { return "test tensors"; }
};

Tensor random_f32(std::mt19937& gen, Shape shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

constexpr int64_t kHidden = 64, kInter = 32, kExperts = 3;
const std::string kMoe = "model.layers.0.mlp";

// A MoE block's float tensors in the per-expert layout (experts.E.{gate,up,down}_proj.weight).
MapSource per_expert_source(std::mt19937& gen) {
  MapSource ws;
  ws.tensors[kMoe + ".gate.weight"] = random_f32(gen, {kExperts, kHidden});
  for (int64_t e = 0; e < kExperts; ++e) {
    const std::string q = kMoe + ".experts." + std::to_string(e);
    ws.tensors[q + ".gate_proj.weight"] = random_f32(gen, {kInter, kHidden});
    ws.tensors[q + ".up_proj.weight"] = random_f32(gen, {kInter, kHidden});
    ws.tensors[q + ".down_proj.weight"] = random_f32(gen, {kHidden, kInter});
  }
  return ws;
}

MoeSpec moe_spec() {
  MoeSpec s;
  s.num_experts = kExperts;
  s.num_experts_per_tok = 2;
  s.moe_intermediate_size = kInter;
  return s;
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()), 0) << what;
}

// --quantization fp8 quantizes every expert per output channel, as load_linear quantizes a dense
// projection: the per-expert layout (through load_linear) and the stacked transformers-5.x layout
// (experts.gate_up_proj / experts.down_proj) give the same codes and scales, which are load_linear's
// of each expert's projection; the router stays f32.
TEST(Fp8MoeLoad, QuantizationFp8QuantizesEachExpertPerChannel) {
  std::mt19937 gen(7);
  MapSource per_expert = per_expert_source(gen);
  per_expert.load_options.quantize_fp8 = true;
  auto a = load_sparse_moe(per_expert, kMoe, moe_spec(), kHidden);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->router.dtype(), DType::kF32);
  EXPECT_EQ(a->w_gate_up.dtype(), DType::kF8E4M3);
  EXPECT_EQ(a->w_down.dtype(), DType::kF8E4M3);
  EXPECT_EQ(a->fp8.gate_up.weight_scale.shape(), (Shape{kExperts, 2 * kInter}));
  EXPECT_EQ(a->fp8.down.weight_scale.shape(), (Shape{kExperts, kHidden}));
  EXPECT_EQ(a->fp8.gate_up.block_n, 0);
  // Expert 2's up_proj as a dense Linear under --quantization fp8.
  auto up = load_linear(per_expert, kMoe + ".experts.2.up_proj", kInter, kHidden, false);
  ASSERT_TRUE(up.is_ok()) << up.status().to_string();
  expect_same_bytes(a->w_gate_up.select(0, 2).slice(0, kInter, 2 * kInter), up->weight, "expert 2 up codes");
  expect_same_bytes(a->fp8.gate_up.weight_scale.select(0, 2).slice(0, kInter, 2 * kInter),
                    up->fp8.weight_scale, "expert 2 up scales");

  MapSource stacked;
  stacked.load_options.quantize_fp8 = true;
  stacked.tensors[kMoe + ".gate.weight"] = per_expert.tensors[kMoe + ".gate.weight"];
  std::vector<Tensor> gate_up, down;
  for (int64_t e = 0; e < kExperts; ++e) {
    const std::string q = kMoe + ".experts." + std::to_string(e);
    gate_up.push_back(per_expert.tensors[q + ".gate_proj.weight"]);
    gate_up.push_back(per_expert.tensors[q + ".up_proj.weight"]);
    down.push_back(per_expert.tensors[q + ".down_proj.weight"]);
  }
  stacked.tensors[kMoe + ".experts.gate_up_proj"] =
      concat_rows(gate_up).view({kExperts, 2 * kInter, kHidden});
  stacked.tensors[kMoe + ".experts.down_proj"] = concat_rows(down).view({kExperts, kHidden, kInter});
  auto b = load_sparse_moe(stacked, kMoe, moe_spec(), kHidden);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  expect_same_bytes(b->w_gate_up, a->w_gate_up, "stacked gate_up codes");
  expect_same_bytes(b->w_down, a->w_down, "stacked down codes");
  expect_same_bytes(b->fp8.gate_up.weight_scale, a->fp8.gate_up.weight_scale, "stacked gate_up scales");
  expect_same_bytes(b->fp8.down.weight_scale, a->fp8.down.weight_scale, "stacked down scales");
}

// f8e4m3 experts with block scales (weight_scale_inv) stack their grids per expert; the combinations
// that cannot load are errors naming what is wrong.
TEST(Fp8MoeLoad, CheckpointExpertsAndRefusedCombinations) {
  std::mt19937 gen(8);
  // Every expert projection stored as e4m3 with 16 x 16 block scales.
  auto fp8_source = [&](int64_t block) {
    MapSource ws = per_expert_source(gen);
    ws.load_options.fp8_block_n = ws.load_options.fp8_block_k = block;
    for (auto& [name, t] : std::map<std::string, Tensor>(ws.tensors)) {
      if (name.find(".experts.") == std::string::npos) continue;
      Tensor q = Tensor::empty(t.shape(), DType::kF8E4M3);
      q.copy_(t.to(DType::kF32).contiguous());
      ws.tensors[name] = q;
      const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
      Tensor s =
          Tensor::empty({(t.size(0) + block - 1) / block, (t.size(1) + block - 1) / block}, DType::kF32);
      for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = 0.01f * static_cast<float>(i + 1);
      ws.tensors[prefix + ".weight_scale_inv"] = s;
    }
    return ws;
  };
  MapSource blocks = fp8_source(16);
  auto m = load_sparse_moe(blocks, kMoe, moe_spec(), kHidden);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->fp8.gate_up.weight_scale.shape(), (Shape{kExperts, 2 * kInter / 16, kHidden / 16}));
  EXPECT_EQ(m->fp8.down.weight_scale.shape(), (Shape{kExperts, kHidden / 16, kInter / 16}));
  EXPECT_EQ(m->fp8.gate_up.block_n, 16);
  // Expert 1's up_proj grid follows its gate_proj grid.
  expect_same_bytes(m->fp8.gate_up.weight_scale.select(0, 1).slice(0, kInter / 16, 2 * kInter / 16),
                    blocks.tensors[kMoe + ".experts.1.up_proj.weight_scale_inv"], "expert 1 up block scales");
  expect_same_bytes(m->w_down.select(0, 2), blocks.tensors[kMoe + ".experts.2.down_proj.weight"],
                    "expert 2 down");

  auto error = [](MapSource& ws) {
    auto r = load_sparse_moe(ws, kMoe, moe_spec(), kHidden);
    return r.is_ok() ? std::string("loaded") : r.status().message();
  };
  // inter = 32 is not a whole number of 64-row blocks: the stacked gate/up grid would mix them.
  MapSource big_blocks = fp8_source(64);
  EXPECT_NE(error(big_blocks).find("moe_intermediate_size 32 is not a multiple of the FP8 block size 64"),
            std::string::npos)
      << error(big_blocks);
  MapSource static_input = fp8_source(16);
  static_input.tensors.erase(kMoe + ".experts.1.down_proj.weight_scale_inv");
  static_input.tensors[kMoe + ".experts.1.down_proj.weight_scale"] =
      Tensor::from_vector(std::vector<float>{0.02f});
  EXPECT_NE(error(static_input).find("different FP8 scale layouts"), std::string::npos)
      << error(static_input);
  static_input.tensors[kMoe + ".experts.1.down_proj.input_scale"] =
      Tensor::from_vector(std::vector<float>{0.02f});
  EXPECT_NE(error(static_input).find("static activation scales"), std::string::npos) << error(static_input);
  MapSource mixed = fp8_source(16);
  mixed.tensors[kMoe + ".experts.0.down_proj.weight"] = random_f32(gen, {kHidden, kInter});
  EXPECT_NE(error(mixed).find("different dtypes"), std::string::npos) << error(mixed);
  MapSource fp8_router = fp8_source(16);
  Tensor router = Tensor::empty({kExperts, kHidden}, DType::kF8E4M3);
  router.copy_(random_f32(gen, {kExperts, kHidden}));
  fp8_router.tensors[kMoe + ".gate.weight"] = router;
  EXPECT_NE(error(fp8_router).find("the router"), std::string::npos) << error(fp8_router);
  MapSource stacked;
  stacked.tensors[kMoe + ".gate.weight"] = random_f32(gen, {kExperts, kHidden});
  stacked.tensors[kMoe + ".experts.gate_up_proj"] =
      Tensor::empty({kExperts, 2 * kInter, kHidden}, DType::kF8E4M3);
  stacked.tensors[kMoe + ".experts.down_proj"] = Tensor::empty({kExperts, kHidden, kInter}, DType::kF8E4M3);
  EXPECT_NE(error(stacked).find("stacked f8e4m3 experts are not supported"), std::string::npos)
      << error(stacked);
}

}  // namespace
}  // namespace rlm
