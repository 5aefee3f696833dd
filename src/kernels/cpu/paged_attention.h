// CPU causal attention with GQA over a paged KV cache, for a batch of extend/decode requests.
// Every output row is computed by the same code from its own request's data only, so results are
// bit-identical whatever the batch composition or thread count.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// Rows of [*, num_heads, head_dim] with a unit last stride; strides in elements.
struct AttnRows {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t token_stride = 0;  // per token (q/out) or per slot (caches)
  int64_t head_stride = 0;
};

// Index data of one call (host pointers; see ops::paged_attention for the meaning).
struct PagedBatch {
  int64_t batch_size = 0;
  const int32_t* qo_indptr = nullptr;   // [bs + 1]
  const int32_t* kv_indptr = nullptr;   // [bs + 1]
  const int32_t* kv_indices = nullptr;  // [kv_indptr[bs]]
  const int32_t* seq_lens = nullptr;    // [bs]
  int64_t num_pages_indexed = 0;        // length of kv_indices
  int64_t page_size = 1;
  int64_t num_slots = 0;                // slots in the caches
  int64_t num_tokens = 0;               // rows of q / out
  // Optional key ranges (cascade attention): request r sees only keys at positions in
  // [kv_begin[r], kv_end[r]) besides the causal/window rule; null: [0, seq_len).
  // 0 <= kv_begin <= kv_end <= seq_len. With key ranges, kv_indptr[r] is only the offset of
  // request r's page list (entries may share one; it need not increase) and only the pages of keys
  // below kv_end must exist.
  const int32_t* kv_begin = nullptr;    // [bs]
  const int32_t* kv_end = nullptr;      // [bs]
};

struct AttnConfig {
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;    // of q and k
  int64_t v_head_dim = 0;  // of v and out; 0: head_dim (models with split sizes, e.g. MLA's 192/128)
  float scale = 1.0f;
  int64_t sliding_window = -1;  // > 0: query at position p sees keys in (p - window, p]
  float logit_soft_cap = 0.0f;  // > 0: s = cap * tanh(s / cap)
  // f8e4m3 caches: keys/values read as e4m3 * k_scale / v_scale (1 for the other dtypes).
  float k_scale = 1.0f;
  float v_scale = 1.0f;

  int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
};

// Validates host index data (throws rlm::Error naming the request and the bad value); also used by
// the CUDA path on a host copy of the index tensors.
void validate_paged_batch(const PagedBatch& batch);

// Validates the index data (throws rlm::Error naming the request and the bad value) and then
// computes out. q: f32 [num_tokens, num_qo_heads, head_dim]; out: f32 [num_tokens, num_qo_heads,
// v_dim]; k_cache: f32/bf16/f16/f8e4m3 [num_slots, num_kv_heads, head_dim], v_cache the same dtype
// [num_slots, num_kv_heads, v_dim] (f8e4m3 rows are dequantized to f32 as e4m3 * scale
// when gathered). Scores, softmax and the weighted sum are all in f32.
// lse (optional, f32 [num_tokens, num_qo_heads] with token stride lse_token_stride): the natural
// log of each row's softmax denominator, max + log(sum exp(s - max)). A row that sees no key (only
// possible with key ranges) gets an all-zero output and lse = -inf.
void paged_attention(const AttnRows& q, const AttnRows& k_cache, const AttnRows& v_cache, const PagedBatch& batch,
                     const AttnConfig& cfg, float* out, int64_t out_token_stride, int64_t out_head_stride,
                     float* lse = nullptr, int64_t lse_token_stride = 0);

// Merges K attention results over disjoint key sets of the same queries (cascade attention):
//   m = max_k lse_k; w_k = exp(lse_k - m); out = sum_k w_k o_k / sum_k w_k; lse_out = m + log(sum_k w_k);
//   all -inf: out = 0, lse_out = -inf.
// parts: f32 [K, n, heads, head_dim] contiguous; lse: f32 [K, n, heads] contiguous; out: f32
// [n, heads, head_dim] contiguous, not overlapping parts; lse_out: f32 [n, heads] or null.
void merge_attention_states(const float* parts, const float* lse, int64_t num_parts, int64_t n, int64_t heads,
                            int64_t head_dim, float* out, float* lse_out);

}  // namespace rlm::cpu
