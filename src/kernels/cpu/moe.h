// CPU mixture-of-experts kernels (ops::moe_topk_softmax / ops::moe_experts).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// Per row: softmax (f32, max-subtracted), the top_k largest (ties: lower id first) in descending
// order, renormalised to sum 1 when `renormalize`.
//   logits: [n, num_experts] row stride ld; weights: f32 [n, top_k]; ids: i32 [n, top_k] (contiguous).
void moe_topk_softmax(const float* logits, int64_t ld, int64_t n, int64_t num_experts, int64_t top_k,
                      bool renormalize, float* weights, int32_t* ids);

// out[t] = sum_j weights[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t)), e = ids[t, j], added in
// increasing expert id, starting from zero. Tokens are gathered per expert and run through the
// BLAS linear kernel.
//   x: f32 [n, hidden] row stride ldx; w_gate_up: [num_experts, 2 * inter, hidden]; w_down:
//   [num_experts, hidden, inter] (contiguous, w_dtype); weights/ids: [n, top_k] contiguous, ids
//   validated in [0, num_experts); out: f32 [n, hidden] row stride ldo.
void moe_experts(const float* x, int64_t ldx, int64_t n, int64_t hidden, int64_t inter, int64_t num_experts,
                 const void* w_gate_up, const void* w_down, DType w_dtype, const float* weights,
                 const int32_t* ids, int64_t top_k, float* out, int64_t ldo);

}  // namespace rlm::cpu
