#include "engine/model_runner.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/caching_allocator.h"
#include "engine/cuda_graph_runner.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/index_check.h"
#endif
#include "attention/hybrid_backend.h"
#include "attention/hybrid_linear_backend.h"
#include "ops/token_ops.h"

namespace rlm {

int64_t kv_pages_for_memory(size_t total_bytes, size_t used_bytes, double fraction, size_t bytes_per_page,
                            size_t reserve_bytes) {
  RLM_CHECK(bytes_per_page > 0) << "kv_pages_for_memory: zero bytes per page";
  const double budget = static_cast<double>(total_bytes) * fraction - static_cast<double>(used_bytes) -
                        static_cast<double>(reserve_bytes);
  if (!(budget > 0.0)) return 0;
  return static_cast<int64_t>(budget / static_cast<double>(bytes_per_page));
}

ModelRunner::~ModelRunner() { graph_runner_.reset(); }

std::vector<int64_t> ModelRunner::cuda_graph_batch_sizes() const {
  return graph_runner_ ? graph_runner_->batch_sizes() : std::vector<int64_t>{};
}

Status ModelRunner::size_kv_pool_from_memory(const KVShape& kv) {
  const double f = config_.mem_fraction_static;
  if (!(f > 0.0 && f < 1.0)) return invalid_argument(str("--mem-fraction-static must be in (0, 1), got ", f));
  const Device dev = config_.device;
  // What the weights (and the CUDA context) hold now; cached free blocks do not count.
  cuda_allocator(dev.index).empty_cache();
  device_synchronize(dev);
  const DeviceMemoryInfo info = device_memory_info(dev);
  const size_t used = info.total_bytes - info.free_bytes;
  const size_t bytes_per_page = 2 * static_cast<size_t>(kv.num_layers * kv.num_kv_heads * kv.head_dim) *
                                dtype_size(config_.kv_dtype) * static_cast<size_t>(config_.page_size);
  // Each of the 2 * num_layers KV tensors may be rounded up by one allocator unit.
  const size_t reserve = 2 * static_cast<size_t>(kv.num_layers) * CachingAllocator::kLargeRound;
  int64_t pages = kv_pages_for_memory(info.total_bytes, used, f, bytes_per_page, reserve);
  pages = std::min<int64_t>(pages, std::numeric_limits<int32_t>::max() / config_.page_size);
  const int64_t need = (config_.max_context_len + config_.page_size - 1) / config_.page_size;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  if (pages < need) {
    return Status(StatusCode::kResourceExhausted,
                  str("--mem-fraction-static ", f, " leaves room for ", pages * config_.page_size,
                      " KV tokens on ", dev.to_string(), " (", static_cast<double>(info.total_bytes) / gib,
                      " GiB total, ", static_cast<double>(used) / gib, " GiB used after loading the weights, ",
                      static_cast<double>(bytes_per_page) / config_.page_size / 1024.0,
                      " KiB per token) but one request of the context length ", config_.max_context_len,
                      " needs ", need * config_.page_size, "; raise --mem-fraction-static or lower the context length"));
  }
  config_.num_pages = pages;
  return Status::ok();
}

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
  const bool from_memory = r->config_.num_pages <= 0 && config.device.is_cuda() && config.mem_fraction_static > 0.0;
  if (r->config_.num_pages <= 0 && !from_memory) {
    const int64_t pages_per_req = (r->config_.max_context_len + r->config_.page_size - 1) / r->config_.page_size;
    r->config_.num_pages = pages_per_req * r->config_.max_requests;
  }
  RLM_ASSIGN_OR_RETURN(r->backend_, make_attention_backend(config.attention_backend, config.prefill_attention_backend,
                                                           config.decode_attention_backend));
  const KVShape kv = model->kv_shape();
  if (config.device.is_cuda() && config.device.index >= cuda_device_count()) {
    return invalid_argument(str("device ", config.device.to_string(), " is not available (",
                                cuda_device_count(), " CUDA devices visible)"));
  }
  model->to(config.device);
  if (const std::optional<MambaShape> ms = model->mamba_shape()) {
    if (r->config_.mamba_slots < 0) return invalid_argument("mamba_slots must not be negative");
    if (r->config_.mamba_slots == 0) r->config_.mamba_slots = 3 * r->config_.max_requests;
    r->mamba_pool_ = std::make_unique<MambaPool>(*ms, r->config_.mamba_slots, config.device);
  }
  if (from_memory) RLM_RETURN_IF_ERROR(r->size_kv_pool_from_memory(kv));
  KVPoolConfig pc;
  pc.num_layers = kv.num_layers;
  pc.num_kv_heads = kv.num_kv_heads;
  pc.head_dim = kv.head_dim;
  pc.num_pages = r->config_.num_pages;
  pc.page_size = r->config_.page_size;
  pc.dtype = config.kv_dtype;
  pc.device = config.device;
  r->kv_pool_ = std::make_unique<KVPool>(pc);
  // An FP8 pool dequantizes with the checkpoint's per-layer scales (1 when it has none).
  if (config.kv_dtype == DType::kF8E4M3) {
    const std::vector<KvScales> scales = model->kv_scales();
    if (!scales.empty()) r->kv_pool_->set_scales(scales);
  }
  r->req_to_token_ =
      std::make_unique<ReqToTokenPool>(r->config_.max_requests, r->config_.max_context_len, config.device);
  r->req_to_token_->set_slot_limit(r->kv_pool_->num_slots());
  if (r->mamba_pool_ != nullptr) {
    // Full-attention layers keep the configured backend; the Gated DeltaNet layers get theirs.
    r->backend_ = std::make_unique<HybridLinearAttnBackend>(std::move(r->backend_),
                                                            std::make_unique<GatedDeltaNetBackend>());
  }
  r->backend_->set_cascade_mode(config.cascade_attention);
  r->future_tokens_ = Tensor::zeros({r->config_.max_requests}, DType::kI32, config.device);
  r->model_ = std::move(model);
  const int64_t graph_bs = std::min(config.cuda_graph_max_bs, r->config_.max_requests);
  // Hybrid linear-attention models and backends without graph support (the `cpu` reference on a
  // GPU pool) decode eagerly.
  if (config.cuda_graph && config.device.is_cuda() && r->mamba_pool_ == nullptr && graph_bs >= 1 &&
      r->backend_->supports_cuda_graph()) {
    CudaGraphRunner::Deps deps;
    deps.model = r->model_.get();
    deps.backend = r->backend_.get();
    deps.kv_pool = r->kv_pool_.get();
    deps.req_to_token = r->req_to_token_.get();
    deps.device = config.device;
    auto graphs = CudaGraphRunner::capture(deps, rlm::cuda_graph_batch_sizes(graph_bs));
    if (graphs.is_ok()) {
      r->graph_runner_ = std::move(graphs).value();
    } else {
      // Serving still works without graphs; say so loudly (tests assert the captured sizes).
      std::fprintf(stderr, "radixlm: CUDA graphs disabled, decoding eagerly: %s\n",
                   graphs.status().message().c_str());
      device_synchronize(config.device);
    }
  }
  return r;
}

ForwardBatch ModelRunner::build_batch(ForwardMode mode, const std::vector<BatchEntry>& entries) {
  ForwardBatch b;
  b.mode = mode;
  b.batch_size = static_cast<int64_t>(entries.size());
  std::vector<int32_t> ids, positions, slots, qo_indptr{0}, logits_rows, seq_lens, req_idx;
  const bool hybrid = mamba_pool_ != nullptr;
  const int64_t vocab = model_->config().vocab_size;
  bool has_future = false;
  for (const BatchEntry& e : entries) {
    for (int32_t id : e.new_ids) {
      // kFutureToken is resolved on the device from tokens the sampler wrote (always in range).
      RLM_CHECK((id >= 0 && id < vocab) || (id == kFutureToken && mode == ForwardMode::kDecode))
          << "token id " << id << " of request slot " << e.req_slot << " is outside the vocabulary [0, " << vocab
          << ")";
    }
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
  // Every index tensor in one upload (one host->device copy per step instead of seven).
  const int64_t n = b.num_tokens, bs = b.batch_size, nout = static_cast<int64_t>(logits_rows.size());
  std::vector<int32_t> packed;
  packed.reserve(static_cast<size_t>(3 * n + 4 * bs + 1 + nout));
  for (const std::vector<int32_t>* v : {&ids, &positions, &slots, &req_idx, &seq_lens, &qo_indptr, &logits_rows}) {
    packed.insert(packed.end(), v->begin(), v->end());
  }
  if (hybrid) packed.insert(packed.end(), b.mamba_slots_cpu.begin(), b.mamba_slots_cpu.end());
  const Tensor all = Tensor::from_vector(packed).to(config_.device);
  int64_t at = 0;
  auto next = [&](int64_t len) {
    Tensor t = all.slice(0, at, at + len);
    at += len;
    return t;
  };
  b.input_ids = next(n);
  b.positions = next(n);
  b.out_cache_loc = next(n);
  b.req_pool_indices = next(bs);
  b.seq_lens = next(bs);
  b.qo_indptr = next(bs + 1);
  b.logits_indices = next(nout);
  if (hybrid) b.mamba_slots = next(bs);
  if (has_future) ops::resolve_future_tokens(b.input_ids, b.req_pool_indices, future_tokens_);
  b.seq_lens_cpu = std::move(seq_lens);
  b.req_pool_indices_cpu = std::move(req_idx);
  return b;
}

Tensor ModelRunner::forward(ForwardBatch& batch) {
  batch.attn_backend = backend_.get();
  batch.kv_pool = kv_pool_.get();
  batch.req_to_token = req_to_token_.get();
  batch.mamba_pool = mamba_pool_.get();
  if (!config_.device.is_cuda()) {
    backend_->init_forward_metadata(batch);
    return model_->forward(batch);
  }
#ifdef RADIXLM_WITH_CUDA
  const int device = config_.device.index;
  // An error recorded by the previous step is seen here without a sync of our own: the caller read
  // that step's results (a copy to the host) after its readback was queued.
  if (auto err = cuda::poll_device_error(device)) fail("device-side check failed in the previous step: " + *err);
  req_to_token_->sync_device();
  Tensor logits;
  if (use_cuda_graph_ && graph_runner_ != nullptr && graph_runner_->can_run(batch)) {
    logits = graph_runner_->replay(batch);
  } else {
    cuda::DeferredIndexChecks deferred;
    backend_->init_forward_metadata(batch);
    logits = model_->forward(batch);
  }
  cuda::enqueue_error_readback(device);
  return logits;
#else
  fail("ModelRunner::forward: radixlm was built without CUDA");
#endif
}

void ModelRunner::synchronize() {
  device_synchronize(config_.device);
#ifdef RADIXLM_WITH_CUDA
  if (config_.device.is_cuda()) {
    if (auto err = cuda::take_device_error(config_.device.index)) fail("device-side check failed: " + *err);
  }
#endif
}

void ModelRunner::record_sampled_tokens(const Tensor& tokens, const ForwardBatch& batch) {
  RLM_CHECK(tokens.numel() == batch.batch_size) << "record_sampled_tokens: " << tokens.describe() << " for "
                                                << batch.batch_size << " requests";
  ops::scatter_tokens(tokens, batch.req_pool_indices, future_tokens_);
}

}  // namespace rlm
