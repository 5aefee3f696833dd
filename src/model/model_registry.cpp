// Architecture name (config.json "architectures"[0]) -> model constructor.
#include <functional>
#include <map>

#include "model/causal_lm.h"
#include "model/gemma3.h"
#include "model/llama.h"
#include "model/qwen2.h"
#include "model/qwen3.h"
#include "model/qwen3_moe.h"
#include "model/qwen3_next.h"

namespace rlm {

namespace {

using Factory = std::function<StatusOr<std::unique_ptr<CausalLM>>(const ModelConfig&, WeightSource&)>;

StatusOr<std::unique_ptr<CausalLM>> create_llama(const ModelConfig& config, WeightSource& weights) {
  LlamaVariant v;
  v.qkv_bias = config.attention_bias;
  v.o_bias = config.attention_bias;
  v.mlp_bias = config.mlp_bias;
  return LlamaForCausalLM::create(config, v, weights);
}

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"Gemma3ForCausalLM", create_gemma3},
      {"Gemma3ForConditionalGeneration", create_gemma3_conditional},
      {"LlamaForCausalLM", create_llama},
      {"MistralForCausalLM", create_llama},
      {"Qwen2ForCausalLM", create_qwen2},
      {"Qwen3ForCausalLM", create_qwen3},
      {"Qwen3MoeForCausalLM", create_qwen3_moe},
      {"Qwen3NextForCausalLM", create_qwen3_next},
  };
  return r;
}

}  // namespace

StatusOr<std::unique_ptr<CausalLM>> create_model(const ModelConfig& config, WeightSource& weights) {
  auto it = registry().find(config.architecture);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, f] : registry()) known += (known.empty() ? "" : ", ") + name;
    return unimplemented(str("unsupported architecture '", config.architecture, "' (supported: ", known, ")"));
  }
  return it->second(config, weights);
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, f] : registry()) names.push_back(name);
  return names;
}

}  // namespace rlm
