// Qwen3-Next beyond the goldens: config parsing (layer pattern fallback, defaults, bad fields),
// loading stacked 3-D expert tensors instead of per-expert ones, and clear errors for missing
// weights. Uses the committed tiny goldens in tests/golden/qwen3next_*.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/prompt_logits.h"
#include "model/qwen3_next.h"

namespace rlm {
namespace {

const std::string kDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/qwen3next_vgroup2_int4_moe8top3";

nlohmann::json golden_config() {
  std::ifstream in(kDir + "/config.json");
  RLM_CHECK(static_cast<bool>(in)) << "cannot open " << kDir << "/config.json";
  return nlohmann::json::parse(in);
}

StatusOr<Qwen3NextSpec> spec_of(const nlohmann::json& j, ModelConfig* out = nullptr) {
  RLM_ASSIGN_OR_RETURN(ModelConfig c, parse_model_config(j));
  RLM_ASSIGN_OR_RETURN(Qwen3NextSpec s, parse_qwen3_next_spec(c));
  if (out != nullptr) *out = c;
  return s;
}

TEST(Qwen3NextConfig, LayerPatternFromLayerTypesOrInterval) {
  nlohmann::json j = golden_config();
  auto s = spec_of(j);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->is_linear, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(s->is_moe, (std::vector<bool>{true, false, true, true}));  // mlp_only_layers [1]
  j.erase("layer_types");
  j["full_attention_interval"] = 2;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = nlohmann::json::array();
  s = spec_of(j);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->is_linear, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(s->is_moe, (std::vector<bool>{false, true, false, true}));
  j.erase("full_attention_interval");  // Qwen3NextConfig's default interval is 4
  s = spec_of(j);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->is_linear, (std::vector<bool>{true, true, true, false}));
}

TEST(Qwen3NextConfig, DefaultsOfQwen3NextConfig) {
  nlohmann::json j = golden_config();
  for (const char* k : {"head_dim", "linear_key_head_dim", "linear_num_value_heads", "linear_num_key_heads",
                        "linear_value_head_dim", "linear_conv_kernel_dim", "norm_topk_prob"}) {
    j.erase(k);
  }
  j["rope_parameters"].erase("partial_rotary_factor");
  ModelConfig c;
  auto s = spec_of(j, &c);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.rotary_dim(), 64);  // partial_rotary_factor 0.25
  EXPECT_EQ(s->linear_num_key_heads, 16);
  EXPECT_EQ(s->linear_num_value_heads, 32);
  EXPECT_EQ(s->linear_key_head_dim, 128);
  EXPECT_EQ(s->linear_value_head_dim, 128);
  EXPECT_EQ(s->linear_conv_kernel_dim, 4);
  EXPECT_TRUE(s->norm_topk_prob);
}

TEST(Qwen3NextConfig, BadFieldsAreErrors) {
  auto error_with = [](nlohmann::json j) {
    auto s = spec_of(j);
    return s.is_ok() ? std::string() : s.status().message();
  };
  nlohmann::json j = golden_config();
  j["linear_num_value_heads"] = 3;
  EXPECT_NE(error_with(j).find("multiple of linear_num_key_heads"), std::string::npos);
  j = golden_config();
  j["layer_types"][2] = "sliding_attention";
  EXPECT_NE(error_with(j).find("expected linear_attention or full_attention"), std::string::npos);
  j = golden_config();
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(error_with(j).find("exceeds num_experts"), std::string::npos);
  j = golden_config();
  j["layer_types"][3] = "linear_attention";
  EXPECT_NE(error_with(j).find("without any full_attention layer"), std::string::npos);
  j = golden_config();
  j["linear_conv_kernel_dim"] = 0;
  EXPECT_NE(error_with(j).find("linear_conv_kernel_dim"), std::string::npos);
}

// Serves a golden's tensors with the experts stacked as transformers' Qwen3NextExperts holds them
// (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]) and the per-expert
// tensors hidden; optionally hides one more tensor.
class StackedExpertsSource : public WeightSource {
 public:
  StackedExpertsSource(std::unique_ptr<WeightSource> inner, int64_t experts, std::string hidden = "")
      : inner_(std::move(inner)), experts_(experts), hidden_(std::move(hidden)) {}
  bool has(const std::string& name) const override {
    if (name == hidden_ || name.find(".experts.0.") != std::string::npos) return false;
    if (ends_with(name, ".experts.gate_up_proj") || ends_with(name, ".experts.down_proj")) {
      return inner_->has(prefix(name) + ".0.down_proj.weight");
    }
    return inner_->has(name);
  }
  StatusOr<Tensor> get(const std::string& name, const Shape& shape) override {
    if (name == hidden_ || name.find(".experts.") != std::string::npos) {
      if (!has(name)) return not_found(str(name, " is not in ", describe()));
      std::vector<Tensor> parts;
      const bool gate_up = ends_with(name, ".gate_up_proj");
      for (int64_t e = 0; e < experts_; ++e) {
        const std::string p = prefix(name) + "." + std::to_string(e);
        for (const char* part : gate_up ? std::vector<const char*>{".gate_proj.weight", ".up_proj.weight"}
                                        : std::vector<const char*>{".down_proj.weight"}) {
          RLM_ASSIGN_OR_RETURN(Tensor t, inner_->get(p + part, gate_up ? Shape{shape[1] / 2, shape[2]}
                                                                       : Shape{shape[1], shape[2]}));
          parts.push_back(t);
        }
      }
      return concat_rows(parts).view(shape);
    }
    return inner_->get(name, shape);
  }
  std::vector<std::string> names() const override { return inner_->names(); }
  std::string describe() const override { return "stacked experts over " + inner_->describe(); }

 private:
  static bool ends_with(const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  }
  static std::string prefix(const std::string& name) { return name.substr(0, name.rfind('.')); }

  std::unique_ptr<WeightSource> inner_;
  int64_t experts_;
  std::string hidden_;
};

Tensor prompt_logits(std::unique_ptr<CausalLM> model, const std::vector<int32_t>& prompt) {
  ModelRunnerConfig rc;
  rc.max_requests = 2;
  rc.max_context_len = 128;
  auto runner = ModelRunner::create(std::move(model), rc);
  RLM_CHECK(runner.is_ok()) << runner.status().to_string();
  EXPECT_EQ((*runner)->attention_backend().name(), "hybrid_linear(cpu)");
  auto logits = rlm::prompt_logits(**runner, prompt);
  RLM_CHECK(logits.is_ok()) << logits.status().to_string();
  return *logits;
}

TEST(Qwen3NextModel, StackedExpertTensorsLoadLikePerExpertOnes) {
  auto config = load_model_config(kDir);
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  const std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  auto per_expert_ws = open_safetensors(kDir);
  ASSERT_TRUE(per_expert_ws.is_ok());
  auto per_expert = create_model(*config, **per_expert_ws);
  ASSERT_TRUE(per_expert.is_ok()) << per_expert.status().to_string();
  auto inner = open_safetensors(kDir);
  ASSERT_TRUE(inner.is_ok());
  StackedExpertsSource stacked_ws(std::move(inner).value(), 8);
  ASSERT_FALSE(stacked_ws.has("model.layers.0.mlp.experts.0.gate_proj.weight"));
  ASSERT_TRUE(stacked_ws.has("model.layers.0.mlp.experts.gate_up_proj"));
  auto stacked = create_model(*config, stacked_ws);
  ASSERT_TRUE(stacked.is_ok()) << stacked.status().to_string();
  const Tensor a = prompt_logits(std::move(per_expert).value(), prompt);
  const Tensor b = prompt_logits(std::move(stacked).value(), prompt);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
}

TEST(Qwen3NextModel, MissingWeightIsAnErrorNamingIt) {
  auto config = load_model_config(kDir);
  ASSERT_TRUE(config.is_ok());
  for (const std::string name : {"model.layers.2.linear_attn.A_log", "model.layers.3.self_attn.q_norm.weight",
                                 "model.layers.0.mlp.experts.gate_up_proj"}) {
    auto inner = open_safetensors(kDir);
    ASSERT_TRUE(inner.is_ok());
    StackedExpertsSource ws(std::move(inner).value(), 8, name);
    auto model = create_model(*config, ws);
    ASSERT_FALSE(model.is_ok()) << name;
    EXPECT_NE(model.status().message().find(name.substr(0, name.rfind('.'))), std::string::npos)
        << model.status().to_string();
  }
}

}  // namespace
}  // namespace rlm
