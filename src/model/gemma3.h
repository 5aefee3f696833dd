// Gemma3ForCausalLM, the text model of Gemma 3 as transformers 5.x defines it (modeling_gemma3.py):
// the embedding scaled by sqrt(hidden) (an f32 scale on the f32 activations), zero-centred
// RMSNorms ((1 + w) * norm(x), folded into f32 factors at load) before and after both the attention
// and the MLP, per-head q/k norms before RoPE, attention scaled by query_pre_attn_scalar^-0.5,
// GeLU-tanh gated MLP, interleaved sliding-window ("sliding_attention", RoPE base
// rope_local_base_freq) and global ("full_attention", rope_theta with its scaling) layers, and the
// optional final logit soft-capping. attn_logit_softcapping is ignored, as transformers'
// Gemma3Attention ignores it (Gemma 3 checkpoints set it to null). Defaults as Gemma3TextConfig.
#pragma once

#include <vector>

#include "attention/attention_backend.h"
#include "model/causal_lm.h"
#include "model/layers.h"

namespace rlm {

// The Gemma3 fields of config.raw beyond ModelConfig, validated (errors name the field).
struct Gemma3Spec {
  double query_pre_attn_scalar = 256;
  double final_logit_softcapping = 0;  // 0: off
  RopeParameters local_rope;           // "sliding_attention" layers
  RopeParameters global_rope;          // "full_attention" layers
};
StatusOr<Gemma3Spec> parse_gemma3_spec(const ModelConfig& config);

class Gemma3ForCausalLM : public CausalLM {
 public:
  static StatusOr<std::unique_ptr<CausalLM>> create(const ModelConfig& config, WeightSource& weights);

  const ModelConfig& config() const override { return config_; }
  KVShape kv_shape() const override;
  Tensor forward(const ForwardBatch& batch) override;
  void to(Device device) override;
  Device device() const override { return device_; }
  std::vector<KvScales> kv_scales() const override { return kv_scales_; }

 private:
  struct DecoderLayer {
    Tensor input_layernorm;             // f32 [hidden], (1 + w) folded, like every norm below
    Tensor post_attention_layernorm;    // f32 [hidden]
    Tensor pre_feedforward_layernorm;   // f32 [hidden]
    Tensor post_feedforward_layernorm;  // f32 [hidden]
    Linear qkv_proj;                    // [(num_qo_heads + 2 * num_kv_heads) * head_dim, hidden]
    Linear o_proj;                      // [hidden, num_qo_heads * head_dim]
    Tensor q_norm, k_norm;              // f32 [head_dim]
    Linear gate_up_proj;                // [2 * intermediate, hidden]
    Linear down_proj;                   // [hidden, intermediate]
    bool sliding = false;               // local layer: sliding window and rope_local_
    AttentionLayer attn;
  };

  Gemma3ForCausalLM(ModelConfig config, Gemma3Spec spec) : config_(std::move(config)), spec_(std::move(spec)) {}
  Status load(WeightSource& weights);
  void attention(const DecoderLayer& layer, const Tensor& x, const ForwardBatch& batch, const Tensor& out);

  ModelConfig config_;
  Gemma3Spec spec_;
  Tensor embed_tokens_;  // [vocab, hidden] (GGUF: may stay block-quantized)
  float embed_scale_ = 1.0f;  // sqrt(hidden) in f32
  std::vector<DecoderLayer> layers_;
  Tensor norm_;          // f32 [hidden], (1 + w) folded
  Tensor lm_head_;       // [vocab, hidden] (the embedding when tied)
  Tensor rope_local_;    // f32 [max_positions, head_dim]
  Tensor rope_global_;   // f32 [max_positions, head_dim]
  Device device_ = Device::cpu();
  std::vector<KvScales> kv_scales_;  // [num_layers] from an FP8 checkpoint (1 when absent)
};

StatusOr<std::unique_ptr<CausalLM>> create_gemma3(const ModelConfig& config, WeightSource& weights);

// Gemma3ForConditionalGeneration (the Gemma 3 4B-27B checkpoints) on text: its config's
// text_config (parse_model_config) and the text model's tensors, stored under
// language_model.model.* / language_model.lm_head.* (as transformers saves them) or
// model.language_model.* / lm_head.*; the vision tower and projector are not loaded, so image
// inputs are not supported.
StatusOr<std::unique_ptr<CausalLM>> create_gemma3_conditional(const ModelConfig& config,
                                                              WeightSource& weights);

}  // namespace rlm
