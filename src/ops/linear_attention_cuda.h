// The CUDA branches of the Gated DeltaNet and MoE ops (ops/linear_attention_ops.h, ops/moe_ops.h):
// called by those ops after their boundary checks when the tensors live on a CUDA device. They
// add the CUDA-only checks (device-side index validation, head dims <= 128, top_k <= 64) and
// launch kernels/cuda/. Built without CUDA, each fails with the op's "not built for cuda:N".
#pragma once

#include <optional>

#include "core/tensor.h"
#include "ops/linear_attention_ops.h"
#include "ops/moe_ops.h"
#include "ops/op_check.h"

namespace rlm::ops::detail {

// `segments`: index tensors already checked for dtype/shape/device and contiguous.
// cuda_gated_delta_rule: `chunked` for ops::chunk_gated_delta_rule (the chunked kernel when
// RADIXLM_GDN_CHUNKED=1 and the call has >= 64 tokens), else the token-by-token kernel.
void cuda_causal_conv1d(const OpChecker& c, const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                        const Tensor& conv_state, const StateSegments& segments, bool silu, const Tensor& out);
void cuda_gated_delta_rule(const OpChecker& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                           const Tensor& beta, const Tensor& ssm_state, const StateSegments& segments,
                           const GatedDeltaRuleParams& params, bool chunked, const Tensor& out);
void cuda_gdn_gating(const OpChecker& c, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                     const Tensor& g, const Tensor& beta);
void cuda_rms_norm_gated(const OpChecker& c, const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                         const Tensor& out);
void cuda_sigmoid_mul(const OpChecker& c, const Tensor& x, const Tensor& gate, const Tensor& out);
void cuda_sigmoid_gate_add(const OpChecker& c, const Tensor& x, const Tensor& gate, const Tensor& out);
void cuda_moe_topk_softmax(const OpChecker& c, const Tensor& router_logits, bool renormalize, const Tensor& topk_weights,
                           const Tensor& topk_ids);
// cuda_moe_experts: `fp8` holds the scales when both expert weights are f8e4m3 (checked by the op).
void cuda_moe_experts(const OpChecker& c, const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down,
                      const Tensor& topk_weights, const Tensor& topk_ids, const Tensor& out,
                      const MoeFp8Scales& fp8);

}  // namespace rlm::ops::detail
