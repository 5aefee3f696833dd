// Qwen3NextForCausalLM as transformers 5.x defines it (modeling_qwen3_next.py): a hybrid stack of
// Gated DeltaNet (linear attention) layers and gated full-attention layers (layer_types, or every
// full_attention_interval-th layer), each followed by a sparse MoE block (softmax top-k routing,
// SiLU experts, a sigmoid-gated shared expert) or a dense MLP (mlp_only_layers /
// decoder_sparse_step). Zero-centred RMSNorms ((1 + w) * norm(x)) are folded into their weights at
// load; mtp.* weights are ignored. See docs/design/qwen3_next.md.
#pragma once

#include <vector>

#include "attention/attention_backend.h"
#include "attention/gdn_backend.h"
#include "model/causal_lm.h"
#include "model/layers.h"
#include "model/moe.h"
#include "model/tensor_parallel.h"

namespace rlm {

// The Qwen3-Next fields of config.json (defaults as Qwen3NextConfig), validated; the MoE fields
// (num_experts, ...) are the MoeSpec base.
struct Qwen3NextSpec : MoeSpec {
  Qwen3NextSpec() {
    num_experts = 512;
    num_experts_per_tok = 10;
    moe_intermediate_size = 512;
    shared_expert_intermediate_size = 512;
    norm_topk_prob = true;
  }
  std::vector<bool> is_linear;  // [num_hidden_layers]  "linear_attention" vs "full_attention"
  std::vector<bool> is_moe;     // [num_hidden_layers]
  int64_t linear_num_key_heads = 16;
  int64_t linear_num_value_heads = 32;
  int64_t linear_key_head_dim = 128;
  int64_t linear_value_head_dim = 128;
  int64_t linear_conv_kernel_dim = 4;
};

// Parses the Qwen3-Next fields of config.raw (errors name the field). `config` may be adjusted:
// head_dim defaults to 256 and partial_rotary_factor to 0.25 when config.json leaves them out.
StatusOr<Qwen3NextSpec> parse_qwen3_next_spec(ModelConfig& config);

class Qwen3NextForCausalLM : public CausalLM {
 public:
  static StatusOr<std::unique_ptr<CausalLM>> create(const ModelConfig& config, WeightSource& weights);

  const ModelConfig& config() const override { return config_; }
  KVShape kv_shape() const override;  // full-attention layers only
  std::optional<MambaShape> mamba_shape() const override;
  Tensor forward(const ForwardBatch& batch) override;
  void to(Device device) override;
  Device device() const override { return device_; }

 private:
  struct FullAttention {
    Linear qkvg_proj;  // [(2 * num_qo_heads + 2 * num_kv_heads) * head_dim, hidden]: q | k | v | gate
    Linear o_proj;     // [hidden, num_qo_heads * head_dim]
    Tensor q_norm, k_norm;  // f32 [head_dim], (1 + w) folded
    AttentionLayer attn;    // layer_id among the full-attention layers
  };
  struct GatedDeltaNet {
    Linear qkv_proj;  // [conv_dim, hidden]: q | k | v (key heads, then value heads, HF's mixed_qkv order)
    Linear z_proj;    // [value_dim, hidden]
    Linear ba_proj;   // [2 * num_v_heads, hidden]: b | a
    Tensor norm;      // f32 [head_v_dim] (gated RMSNorm, plain weight)
    Linear out_proj;  // [hidden, value_dim]
    LinearAttentionLayer layer;  // conv weight, A_log, dt_bias; layer_id among the linear layers
  };
  struct Mlp {
    Linear gate_up_proj;  // [2 * inter, hidden]
    Linear down_proj;     // [hidden, inter]
  };
  struct DecoderLayer {
    bool is_linear = false;
    bool is_moe = false;
    FullAttention attn;
    GatedDeltaNet linear;
    Mlp mlp;
    SparseMoeBlock moe;
    Tensor input_layernorm, post_attention_layernorm;  // f32 [hidden], (1 + w) folded
  };

  Qwen3NextForCausalLM(ModelConfig config, Qwen3NextSpec spec) : config_(std::move(config)), spec_(std::move(spec)) {}
  Status load(WeightSource& weights);
  Status load_full_attention(WeightSource& ws, const std::string& p, FullAttention& a);
  Status load_linear_attention(WeightSource& ws, const std::string& p, GatedDeltaNet& g);
  // A gate_up + down MLP of width `inter` (column- / row-parallel under tensor parallelism).
  Status load_mlp(WeightSource& ws, const std::string& p, int64_t inter, Mlp& m);
  void full_attention(const FullAttention& a, const Tensor& x, const ForwardBatch& batch, const Tensor& out);
  void linear_attention(const GatedDeltaNet& g, const Tensor& x, const ForwardBatch& batch, const Tensor& out);
  void mlp(const Mlp& m, const Tensor& x, const Tensor& out) const;

  ModelConfig config_;
  Qwen3NextSpec spec_;
  int64_t num_full_layers_ = 0, num_linear_layers_ = 0;
  TpShard tp_;           // this rank's shard (size 1: the whole model)
  HeadShard linear_k_;   // this rank's Gated DeltaNet key heads (with their value heads)
  int64_t num_kv_heads_ = 0;  // this rank's KV heads of the full-attention layers
  Tensor embed_tokens_;  // [vocab, hidden] (tp: its vocab shard)
  std::vector<DecoderLayer> layers_;
  Tensor norm_;          // f32 [hidden], (1 + w) folded
  Tensor lm_head_;       // [vocab, hidden]
  Tensor rope_cos_sin_;  // f32 [max_positions, rotary_dim]
  Device device_ = Device::cpu();
};

StatusOr<std::unique_ptr<CausalLM>> create_qwen3_next(const ModelConfig& config, WeightSource& weights);

}  // namespace rlm
