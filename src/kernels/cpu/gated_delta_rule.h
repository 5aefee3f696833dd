// CPU gated delta rule (ops::chunk_gated_delta_rule / ops::recurrent_gated_delta_rule): one work
// item per (request, value head), the [head_k_dim, head_v_dim] state kept in a local buffer.
#pragma once

#include <cstdint>

#include "kernels/cpu/state_segments.h"

namespace rlm::cpu {

// Strided f32 inputs: element (t, h, i) of q is q[t * q_st + h * q_sh + i], likewise k and v;
// g and beta are [num_tokens, num_v_heads] with row strides ldg / ldbeta.
struct GdrInputs {
  const float* q = nullptr;
  int64_t q_st = 0, q_sh = 0;
  const float* k = nullptr;
  int64_t k_st = 0, k_sh = 0;
  const float* v = nullptr;
  int64_t v_st = 0, v_sh = 0;
  const float* g = nullptr;
  int64_t ldg = 0;
  const float* beta = nullptr;
  int64_t ldbeta = 0;
  int64_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
};

// state: f32 [num_slots, num_v_heads, head_k_dim, head_v_dim]; out: f32 [num_tokens,
// num_v_heads, head_v_dim] contiguous. chunk_size > 0 selects the chunked form, 0 the recurrent one.
void gated_delta_rule(const GdrInputs& in, float* state, const SegmentIndex& seg, float scale, bool l2norm,
                      int64_t chunk_size, float* out);

}  // namespace rlm::cpu
