// Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3 attention (per-head q/k RMSNorm,
// optional bias) and, per layer, a sparse MoE block (softmax top-k over num_experts, renormalised
// when norm_topk_prob, SiLU experts of moe_intermediate_size, no shared expert) or a dense MLP of
// intermediate_size (mlp_only_layers / decoder_sparse_step). Defaults as Qwen3MoeConfig.
#include "model/qwen3_moe.h"

#include "model/llama.h"

namespace rlm {

StatusOr<std::unique_ptr<CausalLM>> create_qwen3_moe(const ModelConfig& config, WeightSource& weights) {
  LlamaVariant v;
  v.qk_norm = true;
  v.qkv_bias = config.attention_bias;
  v.o_bias = config.attention_bias;
  v.moe.num_experts = 128;
  v.moe.num_experts_per_tok = 8;
  v.moe.moe_intermediate_size = 768;
  v.moe.norm_topk_prob = false;
  RLM_RETURN_IF_ERROR(parse_moe_spec(config.raw, config.num_hidden_layers, &v.moe, &v.moe_layers));
  if (v.moe.shared_expert_intermediate_size != 0) {
    return unimplemented("Qwen3MoeForCausalLM has no shared expert; shared_expert_intermediate_size must be 0");
  }
  return LlamaForCausalLM::create(config, v, weights);
}

}  // namespace rlm
