// Model construction errors are Status values with clear messages, never crashes.
#include <gtest/gtest.h>

#include "engine/model_loader.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

const std::string kModel = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/llama_gqa2_hd64_tied";

// Serves another source's tensors but hides one name.
class HidingSource : public WeightSource {
 public:
  HidingSource(WeightSource& inner, std::string hidden) : inner_(inner), hidden_(std::move(hidden)) {}
  bool has(const std::string& n) const override { return n != hidden_ && inner_.has(n); }
  StatusOr<Tensor> get(const std::string& n, const Shape& s) override {
    if (n == hidden_) return not_found(str("tensor '", n, "' not found in ", describe()));
    return inner_.get(n, s);
  }
  std::vector<std::string> names() const override { return inner_.names(); }
  std::string describe() const override { return "hiding(" + inner_.describe() + ")"; }

 private:
  WeightSource& inner_;
  std::string hidden_;
};

// Serves another source's tensors, those named in `names` converted to `dtype`.
class RetypingSource : public WeightSource {
 public:
  RetypingSource(WeightSource& inner, std::vector<std::string> names, DType dtype)
      : inner_(inner), names_(std::move(names)), dtype_(dtype) {}
  bool has(const std::string& n) const override { return inner_.has(n); }
  StatusOr<Tensor> get(const std::string& n, const Shape& s) override {
    RLM_ASSIGN_OR_RETURN(Tensor t, inner_.get(n, s));
    for (const std::string& x : names_) {
      if (x == n) return t.to(dtype_);
    }
    return t;
  }
  std::vector<std::string> names() const override { return inner_.names(); }
  std::string describe() const override { return "retyping(" + inner_.describe() + ")"; }

 private:
  WeightSource& inner_;
  std::vector<std::string> names_;
  DType dtype_;
};

TEST(ModelLoad, UnknownArchitectureIsUnimplemented) {
  auto cfg = load_model_config(kModel);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  cfg->architecture = "MysteryForCausalLM";
  auto ws = make_dummy_weights(DType::kF32, 1);
  auto m = create_model(*cfg, *ws);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("MysteryForCausalLM"), std::string::npos);
  EXPECT_NE(m.status().message().find("LlamaForCausalLM"), std::string::npos);  // lists what is supported
}

TEST(ModelLoad, MissingTensorIsNamed) {
  auto cfg = load_model_config(kModel);
  ASSERT_TRUE(cfg.is_ok());
  auto ws = open_safetensors(kModel);
  ASSERT_TRUE(ws.is_ok()) << ws.status().to_string();
  HidingSource hiding(**ws, "model.layers.1.mlp.up_proj.weight");
  auto m = create_model(*cfg, hiding);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
}

TEST(ModelLoad, MisShapedTensorIsNamed) {
  auto cfg = load_model_config(kModel);
  ASSERT_TRUE(cfg.is_ok());
  cfg->intermediate_size += 8;  // the checkpoint's MLP no longer matches
  auto ws = open_safetensors(kModel);
  ASSERT_TRUE(ws.is_ok());
  auto m = create_model(*cfg, **ws);
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("mlp.gate_proj.weight"), std::string::npos) << m.status().message();
}

TEST(ModelLoad, MissingPathAndBadFormat) {
  auto m = load_model("/nonexistent/model");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  LoadOptions lo;
  lo.load_format = "pickle";
  auto m2 = load_model(kModel, lo);
  ASSERT_FALSE(m2.is_ok());
  EXPECT_NE(m2.status().message().find("pickle"), std::string::npos);
}

TEST(ModelLoad, DummyWeightsRunDeterministically) {
  LoadOptions lo;
  lo.load_format = "dummy";
  lo.dummy_seed = 7;
  std::vector<int32_t> outs[2];
  for (int run = 0; run < 2; ++run) {
    auto m = load_model(kModel, lo);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    ModelRunnerConfig rc;
    rc.max_requests = 2;
    rc.max_context_len = 32;
    auto runner = ModelRunner::create(std::move(m->model), rc);
    ASSERT_TRUE(runner.is_ok());
    auto engine = testing::engine_over(std::move(runner).value());
    OfflineRequest r;  // temperature 1: sampled, with a fixed seed
    r.prompt_ids = {1, 2, 3};
    r.params.max_new_tokens = 5;
    r.params.ignore_eos = true;
    r.params.seed = 0;
    const auto o = testing::generate_ids(*engine, {r});
    ASSERT_EQ(o.size(), 1u);
    outs[run] = o[0];
    EXPECT_EQ(outs[run].size(), 5u);
  }
  EXPECT_EQ(outs[0], outs[1]);
}

TEST(OfflineEngine, RejectsBadRequests) {
  auto m = load_model(kModel);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const int64_t vocab = m->config.vocab_size;
  ModelRunnerConfig rc;
  rc.max_requests = 2;
  rc.max_context_len = 16;
  auto runner = ModelRunner::create(std::move(m->model), rc);
  ASSERT_TRUE(runner.is_ok());
  auto engine = testing::engine_over(std::move(runner).value());
  OfflineEngine gen(*engine);
  OfflineRequest empty;
  EXPECT_EQ(gen.generate({empty}).status().code(), StatusCode::kInvalidArgument);
  OfflineRequest oov;
  oov.prompt_ids = {1, static_cast<int32_t>(vocab)};
  auto st = gen.generate({oov}).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos);
  OfflineRequest too_long;
  too_long.prompt_ids = std::vector<int32_t>(10, 1);
  too_long.params.max_new_tokens = 10;
  EXPECT_NE(gen.generate({too_long}).status().message().find("context length"), std::string::npos);
  EXPECT_EQ(gen.num_free_pages(), engine->runner().kv_pool().config().num_pages);
}

// Per-expert MoE matrices are stacked into one tensor per projection: experts whose matrices have
// different dtypes, or gate/up and down projections of different float dtypes, are clear errors
// naming the layer, never a failed check inside the stacking.
TEST(ModelLoad, MoeExpertsOfMixedDtypesAreRefused) {
  const std::string model = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/qwen3moe_gqa2_moe8top2_dense1";
  auto cfg = load_model_config(model);
  ASSERT_TRUE(cfg.is_ok()) << cfg.status().to_string();
  auto ws = open_safetensors(model);
  ASSERT_TRUE(ws.is_ok()) << ws.status().to_string();
  {
    RetypingSource one_expert(**ws, {"model.layers.0.mlp.experts.1.gate_proj.weight"}, DType::kBF16);
    auto m = create_model(*cfg, one_expert);
    ASSERT_FALSE(m.is_ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find("model.layers.0.mlp.experts: expert weights have different dtypes (bf16, f32)"),
              std::string::npos)
        << m.status().message();
  }
  {
    std::vector<std::string> downs;
    for (int e = 0; e < 8; ++e) downs.push_back("model.layers.0.mlp.experts." + std::to_string(e) + ".down_proj.weight");
    RetypingSource all_downs(**ws, downs, DType::kBF16);
    auto m = create_model(*cfg, all_downs);
    ASSERT_FALSE(m.is_ok());
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find("gate/up and down projections have different dtypes (f32, bf16)"),
              std::string::npos)
        << m.status().message();
  }
  // The unchanged checkpoint loads.
  EXPECT_TRUE(create_model(*cfg, **ws).is_ok());
}

}  // namespace
}  // namespace rlm
