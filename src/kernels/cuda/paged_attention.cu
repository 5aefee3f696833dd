// The CUDA paged-attention dispatcher: argument packing, the host-side plan and the choice between
// the split-KV decode kernel and the prefill kernel.
#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <limits>

#include "kernels/cuda/attention_common.cuh"

namespace rlm::cuda {

namespace attn {

DeviceArgs make_device_args(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                            const cpu::PagedBatch& b, const cpu::AttnConfig& cfg, float* out, int64_t out_ts,
                            int64_t out_hs) {
  constexpr int64_t kMaxI32 = std::numeric_limits<int32_t>::max();
  RLM_CHECK(q.dtype == DType::kF32) << "cuda::paged_attention: q must be f32, got " << dtype_name(q.dtype);
  RLM_CHECK(k_cache.dtype == v_cache.dtype) << "cuda::paged_attention: k/v cache dtypes differ";
  RLM_CHECK(cfg.num_kv_heads > 0 && cfg.num_qo_heads % cfg.num_kv_heads == 0)
      << "cuda::paged_attention: num_qo_heads " << cfg.num_qo_heads << " is not a multiple of num_kv_heads "
      << cfg.num_kv_heads;
  RLM_CHECK(cfg.num_qo_heads <= 65535) << "cuda::paged_attention: too many heads " << cfg.num_qo_heads;
  RLM_CHECK(b.page_size > 0 && b.page_size <= kMaxI32) << "cuda::paged_attention: bad page_size " << b.page_size;
  RLM_CHECK(b.num_tokens <= kMaxI32 && b.num_slots <= kMaxI32 * b.page_size)
      << "cuda::paged_attention: sizes beyond 32-bit indices";
  DeviceArgs a;
  a.q = static_cast<const float*>(q.data);
  a.q_ts = q.token_stride;
  a.q_hs = q.head_stride;
  a.k = k_cache.data;
  a.k_ts = k_cache.token_stride;
  a.k_hs = k_cache.head_stride;
  a.v = v_cache.data;
  a.v_ts = v_cache.token_stride;
  a.v_hs = v_cache.head_stride;
  a.out = out;
  a.out_ts = out_ts;
  a.out_hs = out_hs;
  a.qo_indptr = b.qo_indptr;
  a.kv_indptr = b.kv_indptr;
  a.kv_indices = b.kv_indices;
  a.seq_lens = b.seq_lens;
  a.batch_size = static_cast<int32_t>(b.batch_size);
  a.page_size = static_cast<int32_t>(b.page_size);
  a.num_qo_heads = static_cast<int32_t>(cfg.num_qo_heads);
  a.num_kv_heads = static_cast<int32_t>(cfg.num_kv_heads);
  // FP8 caches: s = scale * q.(e4m3 * k_scale) = (scale * k_scale) * q.e4m3.
  a.scale = k_cache.dtype == DType::kF8E4M3 ? cfg.scale * cfg.k_scale : cfg.scale;
  a.sliding_window = static_cast<int32_t>(std::min<int64_t>(cfg.sliding_window, kMaxI32));
  a.soft_cap = cfg.logit_soft_cap;
  a.kv_begin = b.kv_begin;
  a.kv_end = b.kv_end;
  a.head_dim = static_cast<int32_t>(cfg.head_dim);
  a.v_head_dim = static_cast<int32_t>(cfg.v_dim());
  return a;
}

void check_head_dims(const char* op, const cpu::AttnConfig& cfg) {
  for (const int64_t d : {cfg.head_dim, cfg.v_dim()}) {
    if (d < 16 || d > kMaxHeadDim || d % 16 != 0) {
      fail(str(op, ": head_dim ", cfg.head_dim, " / v_head_dim ", cfg.v_dim(),
               " is not supported (each a multiple of 16 from 16 to ", kMaxHeadDim, ")"));
    }
  }
}

namespace {

__global__ void scale_output_kernel(float* out, int64_t rows, int64_t heads, int64_t head_dim, int64_t ts, int64_t hs,
                                    float s) {
  const int64_t total = rows * heads * head_dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = idx % head_dim, h = (idx / head_dim) % heads, t = idx / (head_dim * heads);
    out[t * ts + h * hs + e] *= s;
  }
}

}  // namespace

void scale_attention_output(const cpu::AttnRows& k_cache, const cpu::PagedBatch& b, const cpu::AttnConfig& cfg,
                            float* out, int64_t out_ts, int64_t out_hs) {
  if (k_cache.dtype != DType::kF8E4M3 || cfg.v_scale == 1.0f || b.num_tokens == 0) return;
  const int64_t total = b.num_tokens * cfg.num_qo_heads * cfg.v_dim();
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 4096);
  scale_output_kernel<<<static_cast<unsigned>(blocks), 256, 0, current_stream()>>>(
      out, b.num_tokens, cfg.num_qo_heads, cfg.v_dim(), out_ts, out_hs, cfg.v_scale);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
}

}  // namespace attn

AttentionPlan make_attention_plan(const cpu::PagedBatch& host_batch) {
  AttentionPlan plan;
  plan.all_decode = true;
  for (int64_t r = 0; r < host_batch.batch_size; ++r) {
    const int64_t qo_len = host_batch.qo_indptr[r + 1] - host_batch.qo_indptr[r];
    plan.max_qo_len = std::max(plan.max_qo_len, qo_len);
    plan.max_seq_len = std::max<int64_t>(plan.max_seq_len, host_batch.seq_lens[r]);
    plan.all_decode = plan.all_decode && qo_len == 1;
  }
  return plan;
}

int fixed_decode_num_kv_splits(int64_t batch_size, int64_t max_seq_len_bound) {
  constexpr int64_t kPairsPerKvHead = 32, kKeysPerSplit = 128, kMax = 16;
  const int64_t by_batch = (kPairsPerKvHead + std::max<int64_t>(batch_size, 1) - 1) / std::max<int64_t>(batch_size, 1);
  const int64_t by_len = (std::max<int64_t>(max_seq_len_bound, 1) + kKeysPerSplit - 1) / kKeysPerSplit;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_batch, by_len), 1, kMax));
}

void paged_attention(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                     const cpu::PagedBatch& device_batch, const cpu::AttnConfig& cfg, const AttentionPlan& plan,
                     float* out, int64_t out_token_stride, int64_t out_head_stride) {
  if (device_batch.batch_size == 0) return;
  if (plan.all_decode && device_batch.kv_begin == nullptr && device_batch.kv_end == nullptr) {
    paged_attention_decode(q, k_cache, v_cache, device_batch, cfg, plan, out, out_token_stride, out_head_stride,
                           plan.num_kv_splits);
  } else {
    paged_attention_prefill(q, k_cache, v_cache, device_batch, cfg, plan, out, out_token_stride, out_head_stride);
  }
}

}  // namespace rlm::cuda
