#include "attention/paged_backend.h"

#include <algorithm>

#include "cache/kv_pool.h"
#include "core/env.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/paged_attention.h"
#endif

namespace rlm {

void PagedAttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  RLM_CHECK(batch.kv_pool != nullptr && batch.req_to_token != nullptr) << "ForwardBatch without KV pool";
  const Device device = batch.kv_pool->config().device;
  RLM_CHECK(device.type == device_type_) << "attention backend '" << name_ << "' cannot use a KV pool on "
                                         << device.to_string();
  if (device.is_cpu()) {
    init_host_metadata(batch);
  } else {
    init_device_metadata(batch);
  }
}

void PagedAttentionBackend::init_host_metadata(const ForwardBatch& batch) {
  num_decode_ = 0;
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
  const Device device = batch.kv_pool->config().device;
  kv_indptr_ = Tensor::from_vector(indptr).to(device);
  kv_indices_ = Tensor::from_vector(indices).to(device);
  have_plan_ = false;
  plan_cascade(batch, indptr, device);
}

void PagedAttentionBackend::plan_cascade(const ForwardBatch& batch, const std::vector<int32_t>& kv_indptr,
                                         Device device) {
  cascade_ = make_cascade_plan(cascade_mode_, batch, kv_indptr, batch.req_to_token->table(),
                               batch.kv_pool->page_size());
  if (!cascade_.enabled) return;
  ++stats_.cascade_steps;
  if (cascade_.grouped) ++stats_.grouped_steps;
  stats_.saved_prefix_reads += cascade_.saved_prefix_reads;
  // One upload for all seven arrays, sliced on the device.
  std::vector<int32_t> packed;
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const std::vector<int32_t>* v : {&cascade_.l1_qo_indptr, &cascade_.l1_kv_indptr, &cascade_.l1_seq_lens,
                                        &cascade_.l1_kv_begin, &cascade_.l1_kv_end, &cascade_.l2_kv_begin,
                                        &cascade_.l2_kv_end}) {
    spans.emplace_back(static_cast<int64_t>(packed.size()), static_cast<int64_t>(packed.size() + v->size()));
    packed.insert(packed.end(), v->begin(), v->end());
  }
  const Tensor all = Tensor::from_vector(packed).to(device);
  Tensor* dst[] = {&l1_qo_indptr_, &l1_kv_indptr_, &l1_seq_lens_, &l1_kv_begin_, &l1_kv_end_, &l2_kv_begin_,
                   &l2_kv_end_};
  for (size_t i = 0; i < spans.size(); ++i) *dst[i] = all.slice(0, spans[i].first, spans[i].second);
  l1_plan_ = ops::PagedAttentionPlan{};
  l1_plan_.max_qo_len = cascade_.max_entry_rows;
  l1_plan_.max_seq_len = cascade_.max_entry_seq_len;
}

void PagedAttentionBackend::init_cuda_graph_state(int64_t max_bs, int64_t max_context_len) {
  RLM_CHECK(max_bs > 0 && max_context_len > 0) << "init_cuda_graph_state(" << max_bs << ", " << max_context_len << ")";
  graph_max_bs_ = max_bs;
  graph_max_context_len_ = max_context_len;
  graph_kv_indptr_ = Tensor();
  graph_kv_indices_ = Tensor();
}

void PagedAttentionBackend::set_cuda_graph_mode(bool on) {
  RLM_CHECK(!on || graph_max_bs_ > 0) << "CUDA-graph mode before init_cuda_graph_state";
  graph_mode_ = on;
}

void PagedAttentionBackend::init_device_metadata(const ForwardBatch& batch) {
#ifdef RADIXLM_WITH_CUDA
  const Device device = batch.kv_pool->config().device;
  const int64_t page_size = batch.kv_pool->page_size();
  const int64_t bs = batch.batch_size;
  const ReqToTokenPool& r2t = *batch.req_to_token;
  const Tensor& table = r2t.device_table();
  RLM_CHECK(table.device() == device) << "req_to_token has no mirror on " << device.to_string();
  plan_ = ops::PagedAttentionPlan{};
  num_decode_ = 0;
  int64_t capacity = 0;
  if (graph_mode_) {
    cascade_ = CascadePlan{};
    // Everything below depends on the batch size only: the graph replays it for any lengths.
    RLM_CHECK(batch.mode == ForwardMode::kDecode && bs <= graph_max_bs_)
        << "CUDA-graph metadata for a batch of " << bs << " (max " << graph_max_bs_ << ")";
    const int64_t pages_per_req = (graph_max_context_len_ + page_size - 1) / page_size;
    if (!graph_kv_indptr_.defined()) {
      graph_kv_indptr_ = Tensor::zeros({graph_max_bs_ + 1}, DType::kI32, device);
      graph_kv_indices_ = Tensor::zeros({graph_max_bs_ * pages_per_req}, DType::kI32, device);
    }
    kv_indptr_ = graph_kv_indptr_.slice(0, 0, bs + 1);
    kv_indices_ = graph_kv_indices_;
    capacity = graph_kv_indices_.size(0);
    plan_.max_qo_len = 1;
    plan_.max_seq_len = graph_max_context_len_;
    plan_.all_decode = true;
    plan_.num_kv_splits = cuda::fixed_decode_num_kv_splits(bs, graph_max_context_len_);
  } else {
    // Plan from the host vectors (no device->host copy); buffers sized for this batch.
    RLM_CHECK(static_cast<int64_t>(batch.seq_lens_cpu.size()) == bs &&
              static_cast<int64_t>(batch.extend_lens_cpu.size()) == bs)
        << "ForwardBatch without host seq_lens/extend_lens";
    for (int64_t r = 0; r < bs; ++r) {
      plan_.max_qo_len = std::max<int64_t>(plan_.max_qo_len, batch.extend_lens_cpu[r]);
      plan_.max_seq_len = std::max<int64_t>(plan_.max_seq_len, batch.seq_lens_cpu[r]);
      capacity += (batch.seq_lens_cpu[r] + page_size - 1) / page_size;
    }
    plan_.all_decode = bs > 0 && plan_.max_qo_len == 1 &&
                       std::all_of(batch.extend_lens_cpu.begin(), batch.extend_lens_cpu.end(),
                                   [](int32_t n) { return n == 1; });
    if (plan_.all_decode) plan_.num_kv_splits = cuda::fixed_decode_num_kv_splits(bs, r2t.max_context_len());
    kv_indptr_ = Tensor::empty({bs + 1}, DType::kI32, device);
    kv_indices_ = Tensor::empty({std::max<int64_t>(capacity, 1)}, DType::kI32, device);
    if (batch.mode == ForwardMode::kExtend && cascade_mode_ != CascadeMode::kOff) {
      // The page offsets build_kv_indices will write, computed here from the host lengths.
      std::vector<int32_t> indptr(bs + 1, 0);
      for (int64_t r = 0; r < bs; ++r) {
        indptr[r + 1] = indptr[r] + static_cast<int32_t>((batch.seq_lens_cpu[r] + page_size - 1) / page_size);
      }
      plan_cascade(batch, indptr, device);
    } else {
      cascade_ = CascadePlan{};
    }
    if (!plan_.all_decode && !cascade_.enabled) plan_mixed(batch, r2t.max_context_len());
  }
  cuda::DeviceErrorRecord* rec = cuda::device_error_record(device.index);
  cuda::build_kv_indices(table.data<int32_t>(), table.size(0), table.size(1), table.stride(0),
                         batch.req_pool_indices.data<int32_t>(), batch.seq_lens.data<int32_t>(), bs, page_size,
                         kv_indptr_.data<int32_t>(), kv_indices_.data<int32_t>(), capacity, &rec->kv_indices);
  have_plan_ = true;
#else
  fail("attention backend '" + name_ + "': radixlm was built without CUDA");
#endif
}

#ifdef RADIXLM_WITH_CUDA
void PagedAttentionBackend::plan_mixed(const ForwardBatch& batch, int64_t max_context_len) {
  const int64_t bs = batch.batch_size;
  int64_t nd = 0;
  while (nd < bs && batch.extend_lens_cpu[nd] == 1) ++nd;
  if (nd == 0 || nd == bs) return;
  // A mixed step: the leading one-token (decode) entries take the split-KV decode kernel, as in a
  // decode step, and the prompt chunks the prefill kernel.
  num_decode_ = nd;
  decode_plan_ = ops::PagedAttentionPlan{};
  decode_plan_.max_qo_len = 1;
  decode_plan_.all_decode = true;
  decode_plan_.num_kv_splits = cuda::fixed_decode_num_kv_splits(nd, max_context_len);
  plan_ = ops::PagedAttentionPlan{};
  for (int64_t r = 0; r < bs; ++r) {
    ops::PagedAttentionPlan& p = r < nd ? decode_plan_ : plan_;
    p.max_qo_len = std::max<int64_t>(p.max_qo_len, batch.extend_lens_cpu[r]);
    p.max_seq_len = std::max<int64_t>(p.max_seq_len, batch.seq_lens_cpu[r]);
  }
}
#endif

Tensor PagedAttentionBackend::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                                    const ForwardBatch& batch) {
  const Tensor& k_cache = batch.kv_pool->k_buffer(layer.layer_id);
  const Tensor& v_cache = batch.kv_pool->v_buffer(layer.layer_id);
  const ops::AttentionParams params = pool_attention_params(layer, *batch.kv_pool);
  ops::store_kv_cache(k, v, k_cache, v_cache, batch.out_cache_loc, params.k_scale, params.v_scale);
  return attend(q, layer, batch);
}

Tensor PagedAttentionBackend::forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const QkPrologue& prologue, const AttentionLayer& layer,
                                             const ForwardBatch& batch) {
  static const bool fused = env_switch_on("RADIXLM_FUSED_ROPE_STORE");
  if (device_type_ != DeviceType::kCUDA || !fused) {
    return AttentionBackend::forward_rotary(q, k, v, prologue, layer, batch);
  }
  const ops::AttentionParams params = pool_attention_params(layer, *batch.kv_pool);
  ops::rotary_store_kv_cache(q, k, v, *prologue.positions, *prologue.cos_sin, prologue.is_neox,
                             batch.kv_pool->k_buffer(layer.layer_id), batch.kv_pool->v_buffer(layer.layer_id),
                             batch.out_cache_loc, params.k_scale, params.v_scale, prologue.q_norm,
                             prologue.k_norm, prologue.norm_eps);
  return attend(q, layer, batch);
}

Tensor PagedAttentionBackend::attend(const Tensor& q, const AttentionLayer& layer,
                                     const ForwardBatch& batch) {
  const Tensor& k_cache = batch.kv_pool->k_buffer(layer.layer_id);
  const Tensor& v_cache = batch.kv_pool->v_buffer(layer.layer_id);
  const ops::AttentionParams params = pool_attention_params(layer, *batch.kv_pool);
  // A grouped plan places a group's queries after the shared prefix, which a sliding window would
  // see wrongly: such layers take the single pass.
  if (cascade_.enabled && !(cascade_.grouped && layer.params.sliding_window > 0)) {
    return forward_cascade(q, k_cache, v_cache, layer, batch);
  }
  Tensor out = Tensor::empty({q.size(0), layer.num_qo_heads, layer.head_dim}, DType::kF32, q.device());
  if (num_decode_ > 0) {
    const int64_t nd = num_decode_, bs = batch.batch_size, ps = batch.kv_pool->page_size();
    ops::paged_attention(q.slice(0, 0, nd), k_cache, v_cache, batch.qo_indptr.slice(0, 0, nd + 1),
                         kv_indptr_.slice(0, 0, nd + 1), kv_indices_, batch.seq_lens.slice(0, 0, nd), ps,
                         layer.params, out.slice(0, 0, nd), decode_plan_);
    // The chunks' qo_indptr and kv_indptr entries are offsets into the whole q and kv_indices.
    ops::paged_attention(q, k_cache, v_cache, batch.qo_indptr.slice(0, nd, bs + 1), kv_indptr_.slice(0, nd, bs + 1),
                         kv_indices_, batch.seq_lens.slice(0, nd, bs), ps, layer.params, out, plan_);
  } else if (have_plan_) {
    ops::paged_attention(q, k_cache, v_cache, batch.qo_indptr, kv_indptr_, kv_indices_, batch.seq_lens,
                         batch.kv_pool->page_size(), params, out, plan_);
  } else {
    ops::paged_attention(q, k_cache, v_cache, batch.qo_indptr, kv_indptr_, kv_indices_, batch.seq_lens,
                         batch.kv_pool->page_size(), params, out);
  }
  return out;
}

Tensor PagedAttentionBackend::forward_cascade(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                              const AttentionLayer& layer, const ForwardBatch& batch) {
  const int64_t n = q.size(0), heads = layer.num_qo_heads, d = layer.head_dim;
  const int64_t chunks = cascade_.num_chunks;
  const int64_t page_size = batch.kv_pool->page_size();
  const ops::AttentionParams params = pool_attention_params(layer, *batch.kv_pool);
  RLM_CHECK(n == cascade_.num_rows) << "cascade plan for " << cascade_.num_rows << " rows, q " << q.describe();
  // Parts 0 .. chunks-1: level 1 (one per key chunk of the shared prefixes); part `chunks`: level 2.
  Tensor parts = Tensor::empty({chunks + 1, n, heads, d}, DType::kF32, q.device());
  Tensor lse = Tensor::empty({chunks + 1, n, heads}, DType::kF32, q.device());
  Tensor q1 = q;
  if (chunks > 1) {  // one copy of the rows per chunk (level-1 rows k * n + i read copy k)
    q1 = Tensor::empty({chunks * n, heads, d}, DType::kF32, q.device());
    for (int64_t k = 0; k < chunks; ++k) q1.slice(0, k * n, (k + 1) * n).copy_(q);
  }
  ops::paged_attention_partial(q1, k_cache, v_cache, l1_qo_indptr_, l1_kv_indptr_, kv_indices_, l1_seq_lens_,
                               l1_kv_begin_, l1_kv_end_, page_size, params,
                               parts.slice(0, 0, chunks).view({chunks * n, heads, d}),
                               lse.slice(0, 0, chunks).view({chunks * n, heads}), have_plan_ ? &l1_plan_ : nullptr);
  ops::paged_attention_partial(q, k_cache, v_cache, batch.qo_indptr, kv_indptr_, kv_indices_, batch.seq_lens,
                               l2_kv_begin_, l2_kv_end_, page_size, params, parts.select(0, chunks),
                               lse.select(0, chunks), have_plan_ ? &plan_ : nullptr);
  Tensor out = Tensor::empty({n, heads, d}, DType::kF32, q.device());
  ops::merge_attention_states(parts, lse, out);
  return out;
}

}  // namespace rlm
