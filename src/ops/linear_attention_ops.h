// ops:: for the Gated DeltaNet (linear-attention) layers of hybrid models such as Qwen3-Next
// (docs/design/qwen3_next.md): the depthwise causal conv with its rolling state, the gated delta rule
// (chunked for extend, recurrent for decode) over per-request SSM states, the GDN gating
// (g, beta), the gated RMSNorm and the sigmoid gates. Each op checks shapes, dtypes and devices
// at the boundary and dispatches on the device (kernels/cpu/ now; a CUDA twin implements the same
// signatures). Activations are f32; weights may be f32, bf16 or f16.
//
// Recurrent state lives in a MambaPool (cache/mamba_pool.h): per layer a conv state
// [num_slots, conv_dim, kernel_size - 1] and an SSM state [num_slots, num_v_heads, head_k_dim,
// head_v_dim], both f32 and contiguous. The ops read and write the slots named by StateSegments.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"

namespace rlm::ops {

// The requests of one step, for the ops that carry recurrent state. Request r owns token rows
// [qo_indptr[r], qo_indptr[r+1]) — its new tokens, in order (extend_len = their count; 0 is
// allowed and leaves its slots untouched, e.g. a padded batch entry). Its working state is slot
// state_slots[r]: read at the start when has_initial_state[r] != 0 (otherwise the op starts from
// the zero state and ignores the slot's contents), overwritten with the state after its last new
// token at the end. When track_slots is defined and track_slots[r] >= 0, the state after its first
// track_lens[r] new tokens (1 <= track_lens[r] <= extend_len) is also written to slot
// track_slots[r] — the snapshot a hybrid prefix cache keeps.
// All index tensors are i32, on the device of the data tensors. The state slots and the tracked
// slots of one call must all be distinct (a repeated slot is an error, not a race).
struct StateSegments {
  Tensor qo_indptr;          // i32 [batch_size + 1], qo_indptr[0] = 0, non-decreasing, last = num_tokens
  Tensor state_slots;        // i32 [batch_size]  working slot of each request
  Tensor has_initial_state;  // i32 [batch_size]  0: start from zeros (prefix_len == 0)
  Tensor track_slots;        // i32 [batch_size] or undefined (no snapshots); -1: none for this request
  Tensor track_lens;         // i32 [batch_size]  new tokens before the snapshot (defined iff track_slots is)
};

// Depthwise causal conv1d (+ SiLU) over each request's new tokens, continuing from its conv state
// and updating it. With in[] = the request's conv state (kernel_size - 1 older inputs, oldest
// first; zeros when !has_initial_state) followed by its new rows of x:
//   out[t, c] = act(bias[c] + sum_{j < kernel_size} weight[c, j] * in[t + j, c])
// (HF causal_conv1d_fn / causal_conv1d_update), act = SiLU when `silu` else identity. Afterwards
// the state holds the last kernel_size - 1 inputs; a snapshot holds the last kernel_size - 1
// inputs up to track_lens[r] tokens. One op serves prefill and 1-token decode alike.
//   x: f32 [num_tokens, conv_dim] (unit last stride, any row stride: a view into a projection)
//   weight: f32/bf16/f16 [conv_dim, kernel_size] (HF conv1d.weight [conv_dim, 1, K] squeezed)
//   bias: f32/bf16/f16 [conv_dim] or nullopt
//   conv_state: f32 [num_slots, conv_dim, kernel_size - 1], contiguous (MambaPool layout)
//   out: f32 [num_tokens, conv_dim]; may be x itself (in place), otherwise must not overlap x.
void causal_conv1d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   const Tensor& conv_state, const StateSegments& segments, bool silu, const Tensor& out);

struct GatedDeltaRuleParams {
  float scale = 1.0f;          // query scale, usually head_k_dim^-0.5 (applied after the L2 norm)
  bool use_qk_l2norm = true;   // q, k <- x / sqrt(sum(x^2) + 1e-6) per head, in f32 (FLA / HF)
  int64_t chunk_size = 64;     // chunk_gated_delta_rule only
};

// The gated delta rule over each request's new tokens, from its SSM state (or zeros), writing
// the final state (and the snapshot, if tracked) back. Per value head h, with key head
// kh = h / (num_v_heads / num_k_heads), S = the [head_k_dim, head_v_dim] state, and q, k
// normalised and q scaled as `params` says, for each token t in order:
//   S <- exp(g[t, h]) * S
//   S <- S + k[t] (beta[t, h] * (v[t, h] - S^T k[t]))^T
//   out[t, h] = S^T q[t]
// chunk_gated_delta_rule computes this chunk by chunk (params.chunk_size tokens, the WY/UT form
// of HF's torch_chunk_gated_delta_rule within a chunk, the state carried between chunks; a tracked
// request is split at track_lens[r], so the snapshot is exact); recurrent_gated_delta_rule steps
// token by token (HF torch_recurrent_gated_delta_rule, the decode path). Both agree to fp32
// rounding. Each request's rows depend only on that request.
//   q, k: f32 [num_tokens, num_k_heads, head_k_dim]; v: f32 [num_tokens, num_v_heads, head_v_dim]
//     (unit last stride; any token/head strides, so views into the conv output work)
//   g, beta: f32 [num_tokens, num_v_heads] (unit last stride): log-decay (<= 0) and write strength
//   ssm_state: f32 [num_slots, num_v_heads, head_k_dim, head_v_dim], contiguous (MambaPool layout)
//   out: f32 [num_tokens, num_v_heads, head_v_dim], contiguous; must not overlap the inputs.
// num_v_heads must be a multiple of num_k_heads.
void chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& ssm_state, const StateSegments& segments,
                            const GatedDeltaRuleParams& params, const Tensor& out);
void recurrent_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& ssm_state, const StateSegments& segments,
                                const GatedDeltaRuleParams& params, const Tensor& out);

// The GDN gates (SGLang fused_gdn_gating), all in f32:
//   g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]),  beta[t, h] = sigmoid(b[t, h])
// with softplus(x) = x for x > 20, else log1p(exp(x)) (torch's F.softplus).
//   a, b: f32 [num_tokens, num_v_heads] (unit last stride); A_log, dt_bias: f32/bf16/f16 [num_v_heads];
//   g, beta: f32 [num_tokens, num_v_heads] (unit last stride).
void gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
                const Tensor& beta);

// Gated RMSNorm (HF Qwen3NextRMSNormGated, FLA's norm-before-gate), per row of d:
//   out = (weight * (x / sqrt(mean(x^2) + eps))) * silu(z)
//   x, z, out: f32 [n, d] or [n, heads, d] (same shape; unit last stride; out may alias x);
//   weight: f32/bf16/f16 [d].
void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& weight, float eps, const Tensor& out);

// out = x * sigmoid(gate), elementwise (Qwen3-Next's gated attention output).
//   x, gate, out: f32 [n, d] or [n, heads, d] (same shape; unit last stride; out may alias x).
void sigmoid_mul(const Tensor& x, const Tensor& gate, const Tensor& out);

// out[i, :] += sigmoid(gate[i, 0]) * x[i, :] (the shared expert's sigmoid gate).
//   x, out: f32 [n, d] (unit last stride; must not overlap); gate: f32 [n, 1].
void sigmoid_gate_add(const Tensor& x, const Tensor& gate, const Tensor& out);

}  // namespace rlm::ops
