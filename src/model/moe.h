// The sparse mixture-of-experts block of the Qwen MoE family (Qwen3-MoE, Qwen3-Next): a linear
// router, softmax top-k routing (optionally renormalised, HF norm_topk_prob), SiLU-gated experts
// and, for Qwen3-Next, a sigmoid-gated shared expert. Loading accepts the three layouts
// checkpoints use; the forward runs ops/moe_ops (moe_topk_softmax, moe_experts).
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "model/layers.h"
#include "model/weight_source.h"
#include "ops/moe_ops.h"

namespace rlm {

struct MoeSpec {
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
};

struct SparseMoeBlock {
  Tensor router;               // [num_experts, hidden]
  Tensor w_gate_up;       // [num_experts, 2 * moe_inter, hidden] (f32/bf16/f16, f8e4m3 or a GGUF block type)
  Tensor w_down;          // [num_experts, hidden, moe_inter] (w_gate_up's dtype when both are float,
                          //   else float or its own block type)
  ops::MoeFp8Scales fp8;  // f8e4m3 experts (both projections): their stacked scales (undefined otherwise)
  Linear shared_gate_up;       // [2 * shared_inter, hidden] (shared expert only)
  Linear shared_down;          // [hidden, shared_inter]
  Tensor shared_expert_gate;   // [1, hidden] (undefined without a shared expert)
};

// Loads the block under `prefix` ("model.layers.N.mlp"): `gate.weight` (router) and the experts as
//   per expert: experts.E.{gate,up,down}_proj.weight (Hugging Face checkpoints, save_pretrained);
//   stacked: experts.gate_up_proj [E, 2 * inter, hidden] + experts.down_proj (transformers 5.x
//     parameters);
//   stacked apart: experts.gate_proj / experts.up_proj [E, inter, hidden] + experts.down_proj
//     (GGUF ffn_{gate,up,down}_exps, model/gguf_weights.h);
// and, with a shared expert, shared_expert.{gate,up,down}_proj and shared_expert_gate.
// FP8: per-expert f8e4m3 projections load with their scales as load_linear loads them (block
// `weight_scale_inv`, or per-channel / per-tensor `weight_scale`; no static input_scale), and
// ws.load_options.quantize_fp8 (`--quantization fp8`) quantizes float experts per expert and output
// channel; the scales are stacked per expert (ops::MoeFp8Scales; block scales need
// moe_intermediate_size to be a multiple of block_n). The router stays float. FP8 experts are
// not sharded for tensor parallelism (an error).
StatusOr<SparseMoeBlock> load_sparse_moe(WeightSource& ws, const std::string& prefix, const MoeSpec& spec,
                                         int64_t hidden);

// out = experts(x) (+ sigmoid(shared_expert_gate(x)) * shared_expert(x)).
//   x: f32 [num_tokens, hidden]; out: f32 [num_tokens, hidden] (overwritten, must not overlap x).
void sparse_moe_forward(const SparseMoeBlock& m, const MoeSpec& spec, const Tensor& x, const Tensor& out);

// Moves every weight to `device` (contiguous); block-quantized experts keep their block types.
void move_sparse_moe(SparseMoeBlock& m, Device device);

// The Qwen MoE fields of config.json into `spec` (keeping its defaults for absent ones; errors name
// the field) and which layers are MoE: layer l is when it is not in mlp_only_layers, num_experts > 0
// and (l + 1) % decoder_sparse_step == 0 (transformers' Qwen2-MoE/Qwen3-MoE/Qwen3-Next rule).
Status parse_moe_spec(const nlohmann::json& config, int64_t num_layers, MoeSpec* spec, std::vector<bool>* is_moe);

}  // namespace rlm
