// Qwen3ForCausalLM: the Llama decoder with a per-head RMSNorm on q and k (applied before RoPE)
// and q/k/v/o bias only when config.attention_bias is set.
#include "model/qwen3.h"

#include "model/llama.h"

namespace rlm {

StatusOr<std::unique_ptr<CausalLM>> create_qwen3(const ModelConfig& config, WeightSource& weights) {
  LlamaVariant v;
  v.qk_norm = true;
  v.qkv_bias = config.attention_bias;
  v.o_bias = config.attention_bias;
  return LlamaForCausalLM::create(config, v, weights);
}

}  // namespace rlm
