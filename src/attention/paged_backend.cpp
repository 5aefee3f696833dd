#include "attention/paged_backend.h"

#include "cache/kv_pool.h"

namespace rlm {

void PagedAttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  RLM_CHECK(batch.kv_pool != nullptr && batch.req_to_token != nullptr) << "ForwardBatch without KV pool";
  const Device device = batch.kv_pool->config().device;
  RLM_CHECK(device.type == device_type_) << "attention backend '" << name_ << "' cannot use a KV pool on "
                                         << device.to_string();
  const int64_t page_size = batch.kv_pool->page_size();
  const int64_t bs = batch.batch_size;
  std::vector<int32_t> indptr(bs + 1, 0);
  std::vector<int32_t> indices;
  const Tensor& table = batch.req_to_token->table();
  const int32_t* rows = table.data<int32_t>();
  const int64_t row_len = table.size(1);
  for (int64_t r = 0; r < bs; ++r) {
    const int64_t seq_len = batch.seq_lens_cpu[r];
    const int32_t* row = rows + batch.req_pool_indices_cpu[r] * row_len;
    const int64_t num_pages = (seq_len + page_size - 1) / page_size;
    for (int64_t p = 0; p < num_pages; ++p) {
      const int32_t slot = row[p * page_size];
      RLM_DCHECK(slot % page_size == 0);
      indices.push_back(static_cast<int32_t>(slot / page_size));
    }
    indptr[r + 1] = static_cast<int32_t>(indices.size());
  }
  kv_indptr_ = Tensor::from_vector(indptr).to(device);
  kv_indices_ = Tensor::from_vector(indices).to(device);
}

Tensor PagedAttentionBackend::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                                    const ForwardBatch& batch) {
  const Tensor& k_cache = batch.kv_pool->k_buffer(layer.layer_id);
  const Tensor& v_cache = batch.kv_pool->v_buffer(layer.layer_id);
  ops::store_kv_cache(k, v, k_cache, v_cache, batch.out_cache_loc);
  Tensor out = Tensor::empty({q.size(0), layer.num_qo_heads, layer.head_dim}, DType::kF32, q.device());
  ops::paged_attention(q, k_cache, v_cache, batch.qo_indptr, kv_indptr_, kv_indices_, batch.seq_lens,
                       batch.kv_pool->page_size(), layer.params, out);
  return out;
}

}  // namespace rlm
