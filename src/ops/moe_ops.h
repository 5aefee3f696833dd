// ops:: for sparse mixture-of-experts blocks (Qwen3-Next / Qwen2-MoE style): softmax top-k
// routing and the SiLU-gated experts. Checks at the boundary, dispatch on the device
// (kernels/cpu/moe.*, and the CUDA twins kernels/cuda/moe.h through ops/linear_attention_cuda.h).
#pragma once

#include "core/tensor.h"
#include "ops/ops.h"

namespace rlm::ops {

// The scales of FP8 (f8e4m3) experts, stacked per expert like the weights: expert e's scales are
// index e of dim 0 and follow ops::Fp8Scales (the weight value is e4m3 * scale). Static activation
// scales (input_scale) are not taken: activations are quantized per token (per token and block_k
// column group with block scales).
//   gate_up.weight_scale: f32 [num_experts, 2 * inter] per output channel, or
//     [num_experts, 2 * inter / block_n, ceil(hidden / block_k)] per block: the gate rows' grid
//     then the up rows' (inter a multiple of block_n, so that the stacked grid is each part's);
//   down.weight_scale: f32 [num_experts, hidden], or [num_experts, ceil(hidden / block_n),
//     ceil(inter / block_k)].
struct MoeFp8Scales {
  Fp8Scales gate_up;
  Fp8Scales down;
  bool defined() const { return gate_up.defined() || down.defined(); }
};

// Router: p = softmax(router_logits[t]) in f32 (max-subtracted), the top_k largest p (ties: the
// lower expert id first), and — when `renormalize` (HF norm_topk_prob) — p_j / sum of the selected
// p. Rows come out in descending order of p. top_k = topk_ids.size(1), 1 <= top_k <= num_experts.
//   router_logits: f32 [num_tokens, num_experts] (unit last stride)
//   topk_weights: f32 [num_tokens, top_k]; topk_ids: i32 [num_tokens, top_k] (both contiguous)
void moe_topk_softmax(const Tensor& router_logits, bool renormalize, const Tensor& topk_weights,
                      const Tensor& topk_ids);

// Routed experts: out[t] = sum over j of topk_weights[t, j] * down_e(silu(gate_e(x[t])) * up_e(x[t]))
// with e = topk_ids[t, j]; contributions are added in increasing expert id (HF's index_add order),
// starting from zero. Experts are stacked like transformers 5.x Qwen3NextExperts:
//   x: f32 [num_tokens, hidden] (unit last stride)
//   w_gate_up: f32/bf16/f16 [num_experts, 2 * inter, hidden] (gate_proj rows, then up_proj rows), contiguous
//   w_down: same dtype [num_experts, hidden, inter], contiguous
//   Either may instead be a GGUF block type (each its own: Q4_K_M files store gate/up as Q4_K and
//   down as Q6_K; a float one beside it may then be any of f32/bf16/f16), kept in its blocks and
//   multiplied as ops::linear multiplies quantized weights, on the CPU and on CUDA alike (CPU:
//   8-bit activation blocks, or f32 activations in the reference mode; CUDA: the 8-bit GEMV for
//   experts given <= 8 rows, bf16-dequantized blocks + cuBLAS above: kernels/cuda/quant_matmul.h).
//   Or both are f8e4m3 with their scales in `fp8` (MoeFp8Scales): expert e's matrix and scales
//   through the FP8 linear (ops::linear with Fp8Scales: the CPU's kernels/cpu/fp8_linear.h, with
//   f32 activations in its reference mode set_fp8_linear_activations(kF32); CUDA: cuda::fp8_linear
//   on the expert's slice), per token e4m3 activations as in any FP8 projection.
//   topk_weights: f32 [num_tokens, top_k]; topk_ids: i32 [num_tokens, top_k], each in [0, num_experts)
//     (an id out of range is an error; a token must not list one expert twice)
//   out: f32 [num_tokens, hidden] (overwritten; must not overlap x)
void moe_experts(const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down, const Tensor& topk_weights,
                 const Tensor& topk_ids, const Tensor& out, const MoeFp8Scales& fp8 = {});

// Expert e's scales of a stacked projection (a view of index e of dim 0).
Fp8Scales expert_fp8_scales(const Fp8Scales& stacked, int64_t e);

}  // namespace rlm::ops
