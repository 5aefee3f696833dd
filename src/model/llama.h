// The Llama family as Hugging Face defines it: LlamaForCausalLM (Llama 2/3/3.x, SmolLM2),
// MistralForCausalLM (a sliding window on every layer), Qwen2ForCausalLM (q/k/v bias),
// Qwen3ForCausalLM (per-head q/k RMSNorm) and Qwen3MoeForCausalLM (Qwen3 attention, sparse MoE
// blocks) share this decoder; qwen2.cpp, qwen3.cpp and qwen3_moe.cpp select their variant.
// Layer l attends within config.sliding_window when config.is_sliding_layer(l) (model_config.h
// decides which layers slide, per model_type, as transformers does). A stored lm_head.weight is
// the LM head even when tie_word_embeddings is set (transformers 5 loads it); without one the head
// is the embedding when tied, else an error.
#pragma once

#include <vector>

#include "attention/attention_backend.h"
#include "model/causal_lm.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"

namespace rlm {

struct LlamaVariant {
  bool qkv_bias = false;  // Qwen2: always; Llama: config.attention_bias
  bool o_bias = false;    // Llama: config.attention_bias
  bool mlp_bias = false;  // Llama: config.mlp_bias
  bool qk_norm = false;   // Qwen3
  // Qwen3-MoE: the layers whose MLP is a sparse MoE block ([num_hidden_layers]; empty: all dense).
  std::vector<bool> moe_layers;
  MoeSpec moe;
};

class LlamaForCausalLM : public CausalLM {
 public:
  static StatusOr<std::unique_ptr<CausalLM>> create(const ModelConfig& config, const LlamaVariant& variant,
                                                    WeightSource& weights);

  const ModelConfig& config() const override { return config_; }
  KVShape kv_shape() const override;
  std::vector<KvScales> kv_scales() const override { return kv_scales_; }
  bool cuda_graph_capturable() const override { return variant_.moe_layers.empty(); }
  Tensor forward(const ForwardBatch& batch) override;
  void to(Device device) override;
  Device device() const override { return device_; }

 private:
  struct DecoderLayer {
    Tensor input_layernorm;           // [hidden]
    Tensor post_attention_layernorm;  // [hidden]
    Linear qkv_proj;                  // [(num_qo_heads + 2 * num_kv_heads) * head_dim, hidden] (this rank's heads)
    Linear o_proj;                    // [hidden, num_qo_heads * head_dim] (row-parallel)
    Tensor q_norm, k_norm;            // [head_dim] (Qwen3)
    Linear gate_up_proj;              // [2 * intermediate, hidden] (column-parallel)
    Linear down_proj;                 // [hidden, intermediate] (row-parallel)
    bool is_moe = false;              // Qwen3-MoE: `moe` replaces gate_up_proj / down_proj (no CUDA graphs)
    SparseMoeBlock moe;
    AttentionLayer attn;
  };

  LlamaForCausalLM(ModelConfig config, LlamaVariant variant) : config_(std::move(config)), variant_(variant) {}
  Status load(WeightSource& weights);

  ModelConfig config_;
  LlamaVariant variant_;
  TpShard tp_;             // this rank's shard (size 1: the whole model)
  int64_t num_qo_heads_ = 0;  // this rank's heads and MLP width (the config's at --tp 1)
  int64_t num_kv_heads_ = 0;
  int64_t intermediate_ = 0;
  Tensor embed_tokens_;  // [vocab, hidden] (GGUF: may stay block-quantized, like every matrix); tp: its vocab shard
  std::vector<DecoderLayer> layers_;
  Tensor norm_;     // [hidden]
  Tensor lm_head_;  // [vocab, hidden] (the embedding when tied)
  Tensor rope_cos_sin_;  // f32 [max_positions, rotary_dim]
  std::vector<KvScales> kv_scales_;  // [num_layers] from the checkpoint (1 when absent)
  Device device_ = Device::cpu();
};

}  // namespace rlm
