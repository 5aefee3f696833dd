// CUDA twins of the Gated DeltaNet kernels (kernels/cpu/causal_conv1d.h, gated_delta_rule.h,
// gdn_gates.h); every pointer is on `device`, all work is queued on its context stream. The
// ops:: layer (ops/linear_attention_ops.h) has checked shapes and dtypes; the index data of
// the segments is device data and is validated here by check_segments.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "kernels/cuda/rms_norm.h"

namespace rlm::cuda {

// Device view of ops::StateSegments (i32 arrays on the device).
struct DeviceSegments {
  int64_t batch_size = 0;
  const int32_t* qo_indptr = nullptr;          // [batch_size + 1]
  const int32_t* state_slots = nullptr;        // [batch_size]
  const int32_t* has_initial_state = nullptr;  // [batch_size]
  const int32_t* track_slots = nullptr;        // [batch_size] or nullptr (no snapshots); -1: none
  const int32_t* track_lens = nullptr;         // [batch_size]
};

// Validates the segments with the CPU rules (qo_indptr[0] == 0, non-decreasing, last ==
// num_tokens; slots in [0, num_slots) and distinct across state and track slots; track_lens in
// [1, extend_len]; track_slots -1 or a slot). One check kernel and one 16-byte synchronous read
// back. Returns "" when valid, else a message naming the first offending request.
std::string check_segments(int device, const DeviceSegments& seg, int64_t num_tokens, int64_t num_slots);

// out[t, c] = act(bias[c] + sum_j weight[c, j] * in[t + j, c]) (ops::causal_conv1d), and the
// conv states (and snapshots) updated. Outputs are computed for all rows in parallel (in place,
// x is first copied to the context scratch).
//   x: [num_tokens, conv_dim] (row stride ldx); weight: [conv_dim, kernel_size] of w_dtype,
//   contiguous; bias: [conv_dim] of b_dtype or nullptr; conv_state: [num_slots, conv_dim,
//   kernel_size - 1]; out: [num_tokens, conv_dim] (row stride ldo), may equal x (in place).
void causal_conv1d(int device, const float* x, int64_t ldx, int64_t num_tokens, int64_t conv_dim,
                   const void* weight, DType w_dtype, const void* bias, DType b_dtype, int64_t kernel_size,
                   float* conv_state, const DeviceSegments& seg, bool silu, float* out, int64_t ldo);

// Inputs of the gated delta rule (element strides; the last dimension has unit stride).
struct GdrArgs {
  const float* q = nullptr;  // [num_tokens, num_k_heads, head_k_dim]
  int64_t q_st = 0, q_sh = 0;
  const float* k = nullptr;  // [num_tokens, num_k_heads, head_k_dim]
  int64_t k_st = 0, k_sh = 0;
  const float* v = nullptr;  // [num_tokens, num_v_heads, head_v_dim]
  int64_t v_st = 0, v_sh = 0;
  const float* g = nullptr;     // [num_tokens, num_v_heads] (row stride ldg)
  const float* beta = nullptr;  // [num_tokens, num_v_heads] (row stride ldbeta)
  int64_t ldg = 0, ldbeta = 0;
  int64_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  float scale = 1.0f;
  bool l2norm = true;
};

// head_k_dim and head_v_dim must be <= kMaxGdrHeadDim.
inline constexpr int64_t kMaxGdrHeadDim = 128;

// The gated delta rule token by token (one block per (request, value head), the state in
// registers), from / into ssm_state [num_slots, num_v_heads, head_k_dim, head_v_dim], snapshots at
// track_lens. out: [num_tokens, num_v_heads, head_v_dim] contiguous. Used for both the chunked and
// the recurrent op (same recurrence; see docs/design/qwen3_next.md for the agreement).
void gated_delta_rule(int device, const GdrArgs& in, float* ssm_state, const DeviceSegments& seg, float* out);

// g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b)  (ops::gdn_gating).
//   a, b, g, beta: [n, heads] with row strides; A_log, dt_bias: [heads] of their dtypes.
void gdn_gating(int device, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n, int64_t heads,
                const void* A_log, DType a_log_dtype, const void* dt_bias, DType dt_dtype, float* g, int64_t ldg,
                float* beta, int64_t ldbeta);

// out = (w * rms_norm(x)) * silu(z) per row of d (sum of squares in double like the CPU).
void rms_norm_gated(int device, const Rows& x, const Rows& z, const Rows& out, int64_t d, const void* weight,
                    DType weight_dtype, float eps);

// out = x * sigmoid(gate), elementwise over rows of d.
void sigmoid_mul(int device, const Rows& x, const Rows& gate, const Rows& out, int64_t d);

// out[i, :] += sigmoid(gate[i * ldgate]) * x[i, :].
void sigmoid_gate_add(int device, const float* x, int64_t ldx, const float* gate, int64_t ldgate, int64_t n,
                      int64_t d, float* out, int64_t ldo);

}  // namespace rlm::cuda
