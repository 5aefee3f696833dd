#include "attention/cpu_backend.h"

#include "cache/kv_pool.h"

#include <cstring>

namespace rlm {

namespace {

// A contiguous host copy of a 3-D device tensor with a unit last stride (e.g. q, a strided view
// into the fused QKV buffer): the byte span its elements cover is copied, then compacted.
Tensor to_host_3d(const Tensor& t) {
  if (t.is_contiguous()) return t.to(Device::cpu());
  RLM_CHECK(t.dim() == 3 && t.stride(2) == 1 && t.stride(0) >= 0 && t.stride(1) >= 0)
      << "cpu attention backend: cannot copy " << t.describe() << " to the host";
  const int64_t n = t.size(0), h = t.size(1), d = t.size(2);
  Tensor out = Tensor::empty({n, h, d}, t.dtype());
  if (t.numel() == 0) return out;
  const int64_t extent = (n - 1) * t.stride(0) + (h - 1) * t.stride(1) + d;
  const size_t es = t.element_size();
  std::vector<char> span(static_cast<size_t>(extent) * es);
  device_memcpy(span.data(), Device::cpu(), t.data_ptr(), t.device(), span.size());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < h; ++j) {
      std::memcpy(dst + static_cast<size_t>((i * h + j) * d) * es,
                  span.data() + static_cast<size_t>(i * t.stride(0) + j * t.stride(1)) * es, static_cast<size_t>(d) * es);
    }
  }
  return out;
}

}  // namespace

void CpuAttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  RLM_CHECK(batch.kv_pool != nullptr && batch.req_to_token != nullptr) << "ForwardBatch without KV pool";
  pool_on_device_ = !batch.kv_pool->config().device.is_cpu();
  if (!pool_on_device_) return host_.init_forward_metadata(batch);
  const int64_t page_size = batch.kv_pool->page_size();
  const Tensor& table = batch.req_to_token->table();
  RLM_CHECK(table.device().is_cpu()) << "cpu attention backend: req_to_token must be readable on the host";
  const int64_t row_len = table.size(1);
  std::vector<int32_t> indptr{0}, indices;
  for (int64_t r = 0; r < batch.batch_size; ++r) {
    const int32_t* row = table.data<int32_t>() + batch.req_pool_indices_cpu[r] * row_len;
    const int64_t pages = (batch.seq_lens_cpu[r] + page_size - 1) / page_size;
    for (int64_t p = 0; p < pages; ++p) indices.push_back(static_cast<int32_t>(row[p * page_size] / page_size));
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  kv_indptr_ = Tensor::from_vector(indptr);
  kv_indices_ = Tensor::from_vector(indices);
  qo_indptr_ = batch.qo_indptr.to(Device::cpu());
  seq_lens_ = Tensor::from_vector(batch.seq_lens_cpu);
}

Tensor CpuAttentionBackend::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                                    const ForwardBatch& batch) {
  if (!pool_on_device_) return host_.forward(q, k, v, layer, batch);
  const Tensor& k_cache = batch.kv_pool->k_buffer(layer.layer_id);
  const Tensor& v_cache = batch.kv_pool->v_buffer(layer.layer_id);
  const ops::AttentionParams params = pool_attention_params(layer, *batch.kv_pool);
  ops::store_kv_cache(k, v, k_cache, v_cache, batch.out_cache_loc, params.k_scale, params.v_scale);
  const Tensor q_host = to_host_3d(q);  // [num_tokens, num_qo_heads, head_dim]
  const Tensor k_host = k_cache.to(Device::cpu());
  const Tensor v_host = v_cache.to(Device::cpu());
  Tensor out = Tensor::empty({q.size(0), layer.num_qo_heads, layer.head_dim}, DType::kF32);
  ops::paged_attention(q_host, k_host, v_host, qo_indptr_, kv_indptr_, kv_indices_, seq_lens_,
                       batch.kv_pool->page_size(), params, out);
  return out.to(q.device());
}

}  // namespace rlm
