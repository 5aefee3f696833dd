// ops:: for sparse mixture-of-experts blocks (Qwen3-Next / Qwen2-MoE style): softmax top-k
// routing and the SiLU-gated experts. Checks at the boundary, dispatch on the device
// (kernels/cpu/moe.*, and the CUDA twins kernels/cuda/moe.h through ops/linear_attention_cuda.h).
#pragma once

#include "core/tensor.h"

namespace rlm::ops {

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
//   topk_weights: f32 [num_tokens, top_k]; topk_ids: i32 [num_tokens, top_k], each in [0, num_experts)
//     (an id out of range is an error; a token must not list one expert twice)
//   out: f32 [num_tokens, hidden] (overwritten; must not overlap x)
void moe_experts(const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down, const Tensor& topk_weights,
                 const Tensor& topk_ids, const Tensor& out);

}  // namespace rlm::ops
