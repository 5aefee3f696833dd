// CPU mixture-of-experts kernels (ops::moe_topk_softmax / ops::moe_experts).
#pragma once

#include <cstdint>
#include <functional>

#include "core/dtype.h"

namespace rlm::cpu {

// Per row: softmax (f32, max-subtracted), the top_k largest (ties: lower id first) in descending
// order, renormalised to sum 1 when `renormalize`.
//   logits: [n, num_experts] row stride ld; weights: f32 [n, top_k]; ids: i32 [n, top_k] (contiguous).
void moe_topk_softmax(const float* logits, int64_t ld, int64_t n, int64_t num_experts, int64_t top_k,
                      bool renormalize, float* weights, int32_t* ids);

// One expert's projection: y [m, rows] = x [m, cols] times expert e's matrix transposed (x and y
// contiguous). The caller picks the kernel for the weights' dtype (ops::moe_experts).
using MoeExpertLinear = std::function<void(int64_t e, const float* x, int64_t m, float* y)>;

// out[t] = sum_j weights[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t)), e = ids[t, j], added in
// increasing expert id, starting from zero. Tokens are gathered per expert and run through
// `gate_up` (2 * inter outputs: gate rows, then up rows) and `down` (hidden outputs).
//   x: f32 [n, hidden] row stride ldx; weights/ids: [n, top_k] contiguous, ids validated in
//   [0, num_experts); out: f32 [n, hidden] row stride ldo.
void moe_experts(const float* x, int64_t ldx, int64_t n, int64_t hidden, int64_t inter, int64_t num_experts,
                 const MoeExpertLinear& gate_up, const MoeExpertLinear& down, const float* weights,
                 const int32_t* ids, int64_t top_k, float* out, int64_t ldo);

}  // namespace rlm::cpu
