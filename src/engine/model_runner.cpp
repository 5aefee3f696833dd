#include "engine/model_runner.h"

#include "attention/hybrid_backend.h"
#include "attention/hybrid_linear_backend.h"
#include "ops/token_ops.h"

namespace rlm {

StatusOr<Device> resolve_device(const std::string& text) {
  if (text == "auto") return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  Device d;
  if (!parse_device(text, &d)) return invalid_argument(str("unknown device '", text, "' (auto, cpu, cuda, cuda:N)"));
  if (d.is_cuda() && !cuda_compiled()) return invalid_argument("radixlm was built without CUDA; use --device cpu");
  if (d.is_cuda() && d.index >= cuda_device_count()) {
    return invalid_argument(str("device ", d.to_string(), " is not available (", cuda_device_count(),
                                " CUDA devices visible)"));
  }
  return d;
}

std::string default_attention_backend(Device device) { return device.is_cuda() ? "native" : "cpu"; }

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::create(std::unique_ptr<CausalLM> model,
                                                           const ModelRunnerConfig& config) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  r->config_ = config;
  if (r->config_.max_context_len <= 0) r->config_.max_context_len = model->config().max_position_embeddings;
  if (r->config_.page_size <= 0) return invalid_argument(str("page size must be positive, got ", config.page_size));
  if (r->config_.max_requests <= 0) return invalid_argument("max_requests must be positive");
  if (r->config_.num_pages <= 0) {
    const int64_t pages_per_req = (r->config_.max_context_len + r->config_.page_size - 1) / r->config_.page_size;
    r->config_.num_pages = pages_per_req * r->config_.max_requests;
  }
  RLM_ASSIGN_OR_RETURN(r->backend_, make_attention_backend(config.attention_backend, config.prefill_attention_backend,
                                                           config.decode_attention_backend));
  const KVShape kv = model->kv_shape();
  KVPoolConfig pc;
  pc.num_layers = kv.num_layers;
  pc.num_kv_heads = kv.num_kv_heads;
  pc.head_dim = kv.head_dim;
  pc.num_pages = r->config_.num_pages;
  pc.page_size = r->config_.page_size;
  pc.dtype = config.kv_dtype;
  pc.device = config.device;
  if (config.device.is_cuda() && config.device.index >= cuda_device_count()) {
    return invalid_argument(str("device ", config.device.to_string(), " is not available (",
                                cuda_device_count(), " CUDA devices visible)"));
  }
  model->to(config.device);
  r->kv_pool_ = std::make_unique<KVPool>(pc);
  r->req_to_token_ = std::make_unique<ReqToTokenPool>(r->config_.max_requests, r->config_.max_context_len);
  if (const std::optional<MambaShape> ms = model->mamba_shape()) {
    if (r->config_.mamba_slots < 0) return invalid_argument("mamba_slots must not be negative");
    if (r->config_.mamba_slots == 0) r->config_.mamba_slots = 3 * r->config_.max_requests;
    r->mamba_pool_ = std::make_unique<MambaPool>(*ms, r->config_.mamba_slots, config.device);
    // Full-attention layers keep the configured backend; the Gated DeltaNet layers get theirs.
    r->backend_ = std::make_unique<HybridLinearAttnBackend>(std::move(r->backend_),
                                                            std::make_unique<GatedDeltaNetBackend>());
  }
  r->future_tokens_ = Tensor::zeros({r->config_.max_requests}, DType::kI32, config.device);
  r->model_ = std::move(model);
  return r;
}

ForwardBatch ModelRunner::build_batch(ForwardMode mode, const std::vector<BatchEntry>& entries) {
  ForwardBatch b;
  b.mode = mode;
  b.batch_size = static_cast<int64_t>(entries.size());
  std::vector<int32_t> ids, positions, slots, qo_indptr{0}, logits_rows, seq_lens, req_idx;
  const bool hybrid = mamba_pool_ != nullptr;
  bool has_future = false;
  for (const BatchEntry& e : entries) {
    RLM_CHECK_EQ(e.new_ids.size(), e.new_slots.size()) << " batch entry for request slot " << e.req_slot;
    RLM_CHECK(!e.new_ids.empty()) << "batch entry with no new tokens (request slot " << e.req_slot << ")";
    RLM_CHECK(mode != ForwardMode::kDecode || e.new_ids.size() == 1) << "decode entry with several tokens";
    const int32_t n = static_cast<int32_t>(e.new_ids.size());
    if (e.new_ids[0] == kFutureToken) {
      RLM_CHECK(mode == ForwardMode::kDecode) << "a future token in a non-decode entry (request slot " << e.req_slot << ")";
      has_future = true;
    }
    req_to_token_->write(e.req_slot, e.prefix_len, e.new_slots);
    const int32_t row0 = static_cast<int32_t>(ids.size());
    for (int32_t i = 0; i < n; ++i) {
      ids.push_back(e.new_ids[i]);
      positions.push_back(e.prefix_len + i);
      slots.push_back(e.new_slots[i]);
      if (e.all_logits || i == n - 1) logits_rows.push_back(row0 + i);
    }
    qo_indptr.push_back(static_cast<int32_t>(ids.size()));
    seq_lens.push_back(e.prefix_len + n);
    req_idx.push_back(e.req_slot);
    b.extend_lens_cpu.push_back(n);
    b.prefix_lens_cpu.push_back(e.prefix_len);
    if (hybrid) {
      RLM_CHECK(mamba_pool_->in_use(e.mamba_slot))
          << "batch entry for request slot " << e.req_slot << " has no mamba state slot (" << e.mamba_slot << ")";
      RLM_CHECK(e.mamba_track_slot < 0 ||
                (mamba_pool_->in_use(e.mamba_track_slot) && e.mamba_track_slot != e.mamba_slot &&
                 e.mamba_track_pos > e.prefix_len && e.mamba_track_pos <= e.prefix_len + n))
          << "bad mamba snapshot (slot " << e.mamba_track_slot << ", position " << e.mamba_track_pos
          << ") for request slot " << e.req_slot << " extending [" << e.prefix_len << ", " << e.prefix_len + n << ")";
      b.mamba_slots_cpu.push_back(e.mamba_slot);
      b.mamba_track_slots_cpu.push_back(e.mamba_track_slot);
      b.mamba_track_pos_cpu.push_back(e.mamba_track_pos);
    }
  }
  b.num_tokens = static_cast<int64_t>(ids.size());
  const Device dev = config_.device;
  b.input_ids = Tensor::from_vector(ids).to(dev);
  b.positions = Tensor::from_vector(positions).to(dev);
  b.out_cache_loc = Tensor::from_vector(slots).to(dev);
  b.req_pool_indices = Tensor::from_vector(req_idx).to(dev);
  b.seq_lens = Tensor::from_vector(seq_lens).to(dev);
  if (has_future) ops::resolve_future_tokens(b.input_ids, b.req_pool_indices, future_tokens_);
  b.qo_indptr = Tensor::from_vector(qo_indptr).to(dev);
  b.logits_indices = Tensor::from_vector(logits_rows).to(dev);
  if (hybrid) b.mamba_slots = Tensor::from_vector(b.mamba_slots_cpu).to(dev);
  b.seq_lens_cpu = std::move(seq_lens);
  b.req_pool_indices_cpu = std::move(req_idx);
  return b;
}

Tensor ModelRunner::forward(ForwardBatch& batch) {
  batch.attn_backend = backend_.get();
  batch.kv_pool = kv_pool_.get();
  batch.req_to_token = req_to_token_.get();
  batch.mamba_pool = mamba_pool_.get();
  backend_->init_forward_metadata(batch);
  return model_->forward(batch);
}

void ModelRunner::record_sampled_tokens(const Tensor& tokens, const ForwardBatch& batch) {
  RLM_CHECK(tokens.numel() == batch.batch_size) << "record_sampled_tokens: " << tokens.describe() << " for "
                                                << batch.batch_size << " requests";
  ops::scatter_tokens(tokens, batch.req_pool_indices, future_tokens_);
}

std::vector<int32_t> ModelRunner::sample(const Tensor& logits, const std::vector<ops::SamplingRow>& rows) {
  RLM_CHECK_EQ(static_cast<int64_t>(rows.size()), logits.size(0)) << " sampling rows vs logits " << logits.describe();
  Tensor out = Tensor::empty({logits.size(0)}, DType::kI32, logits.device());
  ops::sample(logits, rows, out);
  Tensor host = out.to(Device::cpu());
  return std::vector<int32_t>(host.data<int32_t>(), host.data<int32_t>() + host.numel());
}

}  // namespace rlm
