// The chunked CUDA gated delta rule (kernels/cuda/gated_delta_rule_chunked.cu): the WY/UT form of
// HF's torch_chunk_gated_delta_rule, chunk_size tokens at a time (at most kGdrChunk), the state
// carried between chunks in shared memory; same arguments and results as gated_delta_rule
// (kernels/cuda/linear_attention.h) up to fp32 rounding. ops::chunk_gated_delta_rule uses it when
// RADIXLM_GDN_CHUNKED=1 (ops/linear_attention_cuda.cpp).
#pragma once

#include <cstdint>

#include "kernels/cuda/linear_attention.h"

namespace rlm::cuda {

// Largest chunk the kernel holds in shared memory; a larger chunk_size runs in chunks of this.
inline constexpr int64_t kGdrChunk = 64;

// Dynamic shared memory of one block for these head dims (214,784 bytes at 128/128).
int64_t gated_delta_rule_chunked_smem_bytes(int64_t head_k_dim, int64_t head_v_dim);

// One block per (request, value head), chunks of a request in order, a tracked request split at
// track_lens[r]. Head dims <= kMaxGdrHeadDim. Launched on the device's context stream.
//   ssm_state: [num_slots, num_v_heads, head_k_dim, head_v_dim]; out: [num_tokens, num_v_heads,
//   head_v_dim] contiguous.
void gated_delta_rule_chunked(int device, const GdrArgs& in, float* ssm_state, const DeviceSegments& seg,
                              int64_t chunk_size, float* out);

}  // namespace rlm::cuda
