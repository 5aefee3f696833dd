// CUDA paged attention (backend "native"): the dispatcher between the split-KV decode kernel and
// the flash-style extend/prefill kernel, plus the GPU builder of kv_indptr/kv_indices. Host-only
// header (no CUDA types), included by ops.cpp under RADIXLM_WITH_CUDA; semantics are those of
// ops::paged_attention.
#pragma once

#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace rlm::cuda {

// Host-side facts about one batch: from host copies of qo_indptr/seq_lens (make_attention_plan), or
// from the caller's own host data (the ModelRunner's *_cpu vectors) with no device->host copy.
struct AttentionPlan {
  int64_t max_qo_len = 0;
  int64_t max_seq_len = 0;  // for decode with num_kv_splits > 0 an upper bound is enough
  bool all_decode = false;  // every request has qo_len == 1
  // Decode: > 0 fixes the split count and each request splits its own seq_len evenly on the device,
  // so the launch depends on nothing but the batch size (CUDA-graph-safe); 0: the rule below.
  int num_kv_splits = 0;
};

// Computes the plan from host index arrays (see cpu::PagedBatch).
AttentionPlan make_attention_plan(const cpu::PagedBatch& host_batch);

// Picks the decode kernel (plan.all_decode, with plan.num_kv_splits, and no key ranges) or the
// prefill kernel and runs
// it on the current device's stream (asynchronous; capturable when the plan is fixed). Every pointer in q, k_cache, v_cache, device_batch and
// out is a device pointer; device_batch's index arrays must have been validated (values are not
// re-checked on the device). q, out: f32; caches f32/bf16/f16/f8e4m3. cfg.head_dim (q/k) and
// cfg.v_dim() (v/out) must each be a multiple of 16 from 16 to 256 (rlm::Error otherwise).
// Throws rlm::Error on any CUDA error.
void paged_attention(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                     const cpu::PagedBatch& device_batch, const cpu::AttnConfig& cfg, const AttentionPlan& plan,
                     float* out, int64_t out_token_stride, int64_t out_head_stride);

// The two kernels directly (tests and benchmarks). The decode one needs every qo_len == 1.
// num_kv_splits <= 0 picks the split rule (see docs/design/attention_cuda.md); > 0 fixes the count
// and sizes every request's splits from its own seq_len.
void paged_attention_decode(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                            const cpu::PagedBatch& device_batch, const cpu::AttnConfig& cfg, const AttentionPlan& plan,
                            float* out, int64_t out_token_stride, int64_t out_head_stride, int num_kv_splits = 0);
// The prefill kernels also serve cascade attention: device_batch's optional kv_begin/kv_end key
// ranges are honoured, and lse (optional, f32 [num_tokens, num_qo_heads], token stride
// lse_token_stride) receives each row's natural-log softmax denominator (see cpu::paged_attention).
void paged_attention_prefill(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                             const cpu::PagedBatch& device_batch, const cpu::AttnConfig& cfg,
                             const AttentionPlan& plan, float* out, int64_t out_token_stride,
                             int64_t out_head_stride, float* lse = nullptr, int64_t lse_token_stride = 0);

// Twin of cpu::merge_attention_states on the device's stream (all device pointers).
void merge_attention_states(const float* parts, const float* lse, int64_t num_parts, int64_t n, int64_t heads,
                            int64_t head_dim, float* out, float* lse_out);

// The decode split count: fixed for batches planned on the host (eager and CUDA-graph steps alike,
// so a graph and the eager path give the same bits at a captured batch size), and the kernel's own
// choice when none is given (num_kv_splits <= 0, with the batch's longest sequence as the bound): about 32 (request,
// split) pairs per kv head, at most one split per 128 keys of the longest possible sequence,
// clamped to [1, 16] (the best or within 3% of the best count of the H100 sweep in
// docs/perf/attention_kernels.md for bs 1-128 at 2k and 8k keys, 8 kv heads).
int fixed_decode_num_kv_splits(int64_t batch_size, int64_t max_seq_len_bound);

// Builds the page table of a batch on the GPU (all device pointers, the device's stream, graph-safe:
// fixed-size outputs, no host synchronisation):
//   kv_indptr[0] = 0, kv_indptr[r+1] = kv_indptr[r] + ceil(seq_lens[r] / page_size);
//   kv_indices[kv_indptr[r] + i] = req_to_token[req_pool_indices[r], i * page_size] / page_size.
// req_to_token: i32 [max_reqs, max_ctx] (row stride req_to_token_stride, slot ids);
// req_pool_indices, seq_lens: i32 [bs]; kv_indptr: i32 [bs + 1]; kv_indices: i32 [capacity].
// Bad device data (a pool index outside [0, max_reqs), a seq_len outside [0, max_ctx], or pages
// past `capacity`) leaves that request's kv_indices unwritten (its pages count as 0 in kv_indptr,
// or kv_indptr is clamped to capacity) and sets *error (i32 [1], device) to 1 + the first bad
// request; *error is 0 when all is well. The caller checks *error whenever it syncs.
void build_kv_indices(const int32_t* req_to_token, int64_t max_reqs, int64_t max_ctx, int64_t req_to_token_stride,
                      const int32_t* req_pool_indices, const int32_t* seq_lens, int64_t batch_size,
                      int64_t page_size, int32_t* kv_indptr, int32_t* kv_indices, int64_t capacity,
                      int32_t* error);

}  // namespace rlm::cuda
