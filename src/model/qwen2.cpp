// Qwen2ForCausalLM (Qwen2, Qwen2.5): the Llama decoder with biases on q/k/v (never on o_proj)
// and optional sliding-window layers (layer_types / use_sliding_window).
#include "model/qwen2.h"

#include "model/llama.h"

namespace rlm {

StatusOr<std::unique_ptr<CausalLM>> create_qwen2(const ModelConfig& config, WeightSource& weights) {
  LlamaVariant v;
  v.qkv_bias = true;
  return LlamaForCausalLM::create(config, v, weights);
}

}  // namespace rlm
