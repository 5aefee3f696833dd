#include "engine/model_runner.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "core/caching_allocator.h"
#include "dist/tp_group.h"
#include "engine/cuda_graph_runner.h"
#include "engine/sampler.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/pdl.h"
#endif
#include "attention/hybrid_backend.h"
#include "attention/hybrid_linear_backend.h"
#include "ops/sampling_ops.h"
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

std::unique_ptr<KVPool> ModelRunner::make_kv_pool(const KVShape& kv, int64_t num_pages) const {
  KVPoolConfig pc;
  pc.num_layers = kv.num_layers;
  pc.num_kv_heads = kv.num_kv_heads;
  pc.head_dim = kv.head_dim;
  pc.num_pages = num_pages;
  pc.page_size = config_.page_size;
  pc.dtype = config_.kv_dtype;
  pc.device = config_.device;
  auto pool = std::make_unique<KVPool>(pc);
  // An FP8 pool dequantizes with the checkpoint's per-layer scales (1 when it has none).
  if (config_.kv_dtype == DType::kF8E4M3) {
    const std::vector<KvScales> scales = model_->kv_scales();
    if (!scales.empty()) pool->set_scales(scales);
  }
  return pool;
}

size_t ModelRunner::kv_reserve_bytes(const KVShape& kv) {
  // Each of the 2 * num_layers KV tensors may be rounded up by one allocator unit.
  return 2 * static_cast<size_t>(kv.num_layers) * CachingAllocator::kLargeRound;
}

namespace {

// A tensor-parallel rank is gone: no step can run any more, so the process ends (the other ranks
// see its connections close and end too) rather than answer every later request with an error.
template <typename F>
auto or_end_group(F&& f) {
  try {
    return f();
  } catch (const GroupError& e) {
    std::fprintf(stderr, "radixlm: the tensor-parallel group failed, exiting: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

// Device memory in use once queued work is done and the general pool's cached blocks are released.
size_t settled_used_bytes(Device dev) {
  device_synchronize(dev);
  cuda_allocator(dev.index).empty_cache();
  device_synchronize(dev);
  const DeviceMemoryInfo info = device_memory_info(dev);
  return info.total_bytes - info.free_bytes;
}

}  // namespace

void ModelRunner::run_profile_step(const ProfileStep& step) {
  const int64_t vocab = model_->config().vocab_size;
  const int64_t ps = config_.page_size;
  std::vector<BatchEntry> entries;
  std::vector<int32_t> mamba_slots;
  int64_t next_page = 0;
  for (size_t r = 0; r < step.extend_lens.size(); ++r) {
    BatchEntry e;
    e.req_slot = req_to_token_->alloc();
    RLM_CHECK(e.req_slot >= 0) << "profile step '" << step.what << "': no free request row";
    const int64_t len = step.cached_prefix + step.extend_lens[r];
    std::vector<int32_t> slots(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) slots[i] = static_cast<int32_t>(next_page * ps + i);
    next_page += (len + ps - 1) / ps;
    req_to_token_->write(e.req_slot, 0, std::vector<int32_t>(slots.begin(), slots.begin() + step.cached_prefix));
    e.prefix_len = step.cached_prefix;
    e.new_slots.assign(slots.begin() + step.cached_prefix, slots.end());
    e.new_ids.assign(e.new_slots.size(), static_cast<int32_t>(r % vocab));
    e.skip_logits = !step.sample_all && r + 1 != step.extend_lens.size();
    if (mamba_pool_ != nullptr) {
      e.mamba_slot = mamba_pool_->alloc();
      RLM_CHECK(e.mamba_slot >= 0) << "profile step '" << step.what << "': no free state slot";
      mamba_pool_->zero_slot(e.mamba_slot);
      mamba_slots.push_back(e.mamba_slot);
    }
    entries.push_back(std::move(e));
  }
  ForwardBatch batch = build_batch(step.mode, entries);
  const CascadeMode cascade = config_.cascade_attention;
  if (step.cascade) backend_->set_cascade_mode(CascadeMode::kOn);
  Tensor logits = forward(batch);
  backend_->set_cascade_mode(cascade);
  // The sampler's buffers: with logprobs, log-softmax of a copy and the top-k logprobs.
  constexpr int32_t kTopLogprobs = 20;  // the OpenAI API's largest top_logprobs
  std::vector<SampleRow> rows(static_cast<size_t>(logits.size(0)));
  for (SampleRow& row : rows) {
    row.sampling.top_k = 50;
    row.sampling.top_p = 0.9f;
    row.logprobs = step.sample_all ? kTopLogprobs : -1;
  }
  (void)Sampler(future_tokens_).launch(logits, rows);
  synchronize();
  for (const BatchEntry& e : entries) req_to_token_->free(e.req_slot);
  for (const int32_t m : mamba_slots) mamba_pool_->free(m);
}

size_t ModelRunner::kv_bytes_per_page(const KVShape& kv) const {
  return 2 * static_cast<size_t>(kv.num_layers * kv.num_kv_heads * kv.head_dim) * dtype_size(config_.kv_dtype) *
         static_cast<size_t>(config_.page_size);
}

Status ModelRunner::check_context_fits(const KVShape& kv) const {
  const double f = config_.mem_fraction_static;
  if (!(f > 0.0 && f < 1.0)) return invalid_argument(str("--mem-fraction-static must be in (0, 1), got ", f));
  const Device dev = config_.device;
  const size_t used = settled_used_bytes(dev);
  const size_t total = device_memory_info(dev).total_bytes;
  const size_t bytes_per_page = kv_bytes_per_page(kv);
  const int64_t min_pages = (config_.max_context_len + config_.page_size - 1) / config_.page_size;
  const int64_t upper = kv_pages_for_memory(total, used, f, bytes_per_page, kv_reserve_bytes(kv));
  if (upper >= min_pages) return Status::ok();
  const double gib = 1024.0 * 1024.0 * 1024.0;
  return Status(StatusCode::kResourceExhausted,
                str("--mem-fraction-static ", f, " leaves room for ", upper * config_.page_size, " KV tokens on ",
                    dev.to_string(), " (", static_cast<double>(total) / gib, " GiB total, ",
                    static_cast<double>(used) / gib, " GiB used after loading the weights, ",
                    static_cast<double>(bytes_per_page) / config_.page_size / 1024.0,
                    " KiB per token) but one request of the context length ", config_.max_context_len, " needs ",
                    min_pages * config_.page_size, "; raise --mem-fraction-static or lower the context length"));
}

Status ModelRunner::plan_memory(const KVShape& kv) {
  const Device dev = config_.device;
  CachingAllocator& alloc = cuda_allocator(dev.index);
  const int64_t min_pages = (config_.max_context_len + config_.page_size - 1) / config_.page_size;
  (void)settled_used_bytes(dev);
  const size_t alloc0 = alloc.stats().allocated_bytes;
  const std::vector<ProfileStep> steps =
      profile_steps(std::max<int64_t>(config_.max_num_tokens, 1), config_.max_requests, config_.max_context_len,
                    config_.cascade_attention != CascadeMode::kOff);
  MemoryProfile profile;
  profile.total_bytes = device_memory_info(dev).total_bytes;
  kv_pool_ = make_kv_pool(kv, profile_kv_pages(steps, config_.page_size));
  req_to_token_->set_slot_limit(kv_pool_->num_slots());
  try {
    const size_t start = alloc.stats().allocated_bytes;
    alloc.reset_peak();
    for (const ProfileStep& step : steps) run_profile_step(step);
    profile.activation_bytes = alloc.stats().peak_allocated_bytes - start;
    if (config_.cuda_graph) {
      const size_t before_graphs = settled_used_bytes(dev);
      capture_cuda_graphs();
      const size_t with_graphs = settled_used_bytes(dev);
      profile.graph_bytes = with_graphs > before_graphs ? with_graphs - before_graphs : 0;
      graph_runner_.reset();
    }
  } catch (const Error& e) {
    graph_runner_.reset();
    kv_pool_.reset();
    return Status(StatusCode::kResourceExhausted,
                  str("the start-up profile (the largest step: ",
                      std::max(config_.max_num_tokens, config_.max_requests), " tokens, ", config_.max_requests,
                      " requests) does not fit on ", dev.to_string(),
                      "; lower --max-prefill-tokens or --max-running-requests: ", e.what()));
  }
  kv_pool_.reset();
  profile.used_bytes = settled_used_bytes(dev);
  const size_t alloc_end = alloc.stats().allocated_bytes;
  profile.persistent_bytes = alloc_end > alloc0 ? alloc_end - alloc0 : 0;
  RLM_ASSIGN_OR_RETURN(MemoryPlan plan, plan_kv_memory(profile, config_.mem_fraction_static, kv_bytes_per_page(kv),
                                                       kv_reserve_bytes(kv), min_pages));
  if (plan.num_pages > std::numeric_limits<int32_t>::max() / config_.page_size) {  // slots are int32
    plan.num_pages = std::numeric_limits<int32_t>::max() / config_.page_size;
    plan.kv_bytes = static_cast<size_t>(plan.num_pages) * kv_bytes_per_page(kv);
  }
  config_.num_pages = plan.num_pages;
  memory_plan_ = std::move(plan);
  return Status::ok();
}

void ModelRunner::capture_cuda_graphs() {
  const int64_t graph_bs = std::min(config_.cuda_graph_max_bs, config_.max_requests);
  // Hybrid linear-attention models, sparse-MoE models (CausalLM::cuda_graph_capturable) and backends
  // without graph support (the `cpu` reference on a GPU pool) decode eagerly.
  if (!config_.cuda_graph || !config_.device.is_cuda() || mamba_pool_ != nullptr || graph_bs < 1 ||
      !backend_->supports_cuda_graph() || !model_->cuda_graph_capturable()) {
    return;
  }
  CudaGraphRunner::Deps deps;
  deps.model = model_.get();
  deps.backend = backend_.get();
  deps.kv_pool = kv_pool_.get();
  deps.req_to_token = req_to_token_.get();
  deps.device = config_.device;
  auto graphs = CudaGraphRunner::capture(deps, rlm::cuda_graph_batch_sizes(graph_bs));
  if (graphs.is_ok()) {
    graph_runner_ = std::move(graphs).value();
  } else {
    // Serving still works without graphs; say so loudly (tests assert the captured sizes).
    std::fprintf(stderr, "radixlm: CUDA graphs disabled, decoding eagerly: %s\n", graphs.status().message().c_str());
    device_synchronize(config_.device);
  }
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
#ifdef RADIXLM_WITH_CUDA
  if (config.device.is_cuda()) cuda::set_pdl_enabled(config.pdl);
#endif
  model->to(config.device);
  if (const std::optional<MambaShape> ms = model->mamba_shape()) {
    if (r->config_.mamba_slots < 0) return invalid_argument("mamba_slots must not be negative");
    if (r->config_.mamba_slots == 0) r->config_.mamba_slots = 3 * r->config_.max_requests;
    r->mamba_pool_ = std::make_unique<MambaPool>(*ms, r->config_.mamba_slots, config.device);
  }
  // Before the request table (max_requests x context) is made: one request must fit at all.
  if (from_memory) RLM_RETURN_IF_ERROR(r->check_context_fits(kv));
  r->req_to_token_ =
      std::make_unique<ReqToTokenPool>(r->config_.max_requests, r->config_.max_context_len, config.device);
  if (r->mamba_pool_ != nullptr) {
    // Full-attention layers keep the configured backend; the Gated DeltaNet layers get theirs.
    r->backend_ = std::make_unique<HybridLinearAttnBackend>(std::move(r->backend_),
                                                            std::make_unique<GatedDeltaNetBackend>());
  }
  r->backend_->set_cascade_mode(config.cascade_attention);
  r->future_tokens_ = Tensor::zeros({r->config_.max_requests}, DType::kI32, config.device);
  r->model_ = std::move(model);
  if (from_memory) RLM_RETURN_IF_ERROR(r->plan_memory(kv));  // the profile run; sets num_pages
  if (r->config_.tp_group != nullptr) r->agree_on_num_pages();
  r->kv_pool_ = r->make_kv_pool(kv, r->config_.num_pages);
  r->req_to_token_->set_slot_limit(r->kv_pool_->num_slots());
  r->capture_cuda_graphs();
  // From here on rank 0's calls go to the other ranks too (the profile run and the captures above
  // ran on every rank by themselves, in the same order).
  if (r->config_.tp_group != nullptr && r->config_.tp_group->rank() == 0 && r->config_.tp_group->size() > 1) {
    r->step_sender_ = &r->config_.tp_group->steps();
    if (r->mamba_pool_ != nullptr) {
      StepSender* sender = r->step_sender_;
      r->mamba_pool_->set_copy_listener(
          [sender](int32_t src, int32_t dst) { or_end_group([&] { sender->copy_state_slot(src, dst); }); });
    }
  }
  return r;
}

void ModelRunner::agree_on_num_pages() {
  TcpGroup& group = config_.tp_group->control();
  const int64_t mine = config_.num_pages;
  const std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(&mine),
                                   reinterpret_cast<const uint8_t*>(&mine) + sizeof(mine));
  for (const std::vector<uint8_t>& other : group.all_gather(bytes)) {
    int64_t pages = 0;
    RLM_CHECK_EQ(other.size(), sizeof(pages));
    std::memcpy(&pages, other.data(), sizeof(pages));
    config_.num_pages = std::min(config_.num_pages, pages);
  }
  if (memory_plan_ && memory_plan_->num_pages != config_.num_pages) {
    memory_plan_->kv_bytes = static_cast<size_t>(config_.num_pages) * memory_plan_->kv_bytes / memory_plan_->num_pages;
    memory_plan_->num_pages = config_.num_pages;
  }
}

ForwardBatch ModelRunner::build_batch(ForwardMode mode, const std::vector<BatchEntry>& entries) {
  if (step_sender_ != nullptr) or_end_group([&] { step_sender_->build(mode, entries, *req_to_token_); });
  ForwardBatch b;
  b.mode = mode;
  b.batch_size = static_cast<int64_t>(entries.size());
  std::vector<int32_t> ids, positions, slots, qo_indptr{0}, logits_rows, seq_lens, req_idx;
  const bool hybrid = mamba_pool_ != nullptr;
  const int64_t vocab = model_->config().vocab_size;
  // Entries [0, num_future) hold every future token and have one token each, so token row i is
  // entry i there.
  int64_t num_future = 0;
  bool single_tokens = true;  // every entry so far has one token
  for (const BatchEntry& e : entries) {
    RLM_CHECK_EQ(e.new_ids.size(), e.new_slots.size()) << " batch entry for request slot " << e.req_slot;
    RLM_CHECK(!e.new_ids.empty()) << "batch entry with no new tokens (request slot " << e.req_slot << ")";
    RLM_CHECK(mode != ForwardMode::kDecode || e.new_ids.size() == 1) << "decode entry with several tokens";
    for (int32_t id : e.new_ids) {
      // kFutureToken is resolved on the device from tokens the sampler wrote (always in range).
      RLM_CHECK((id >= 0 && id < vocab) || (id == kFutureToken && e.new_ids.size() == 1))
          << "token id " << id << " of request slot " << e.req_slot << " is outside the vocabulary [0, " << vocab
          << ")";
    }
    RLM_CHECK(!(e.all_logits && e.skip_logits)) << "batch entry both with all logits and none (request slot "
                                                << e.req_slot << ")";
    const int32_t n = static_cast<int32_t>(e.new_ids.size());
    single_tokens = single_tokens && n == 1;
    if (e.new_ids[0] == kFutureToken) {
      RLM_CHECK(single_tokens) << "a future token after an entry of several tokens (request slot " << e.req_slot
                               << "): one-token entries come first";
      num_future = static_cast<int64_t>(b.extend_lens_cpu.size()) + 1;
    }
    req_to_token_->write(e.req_slot, e.prefix_len, e.new_slots);
    const int32_t row0 = static_cast<int32_t>(ids.size());
    for (int32_t i = 0; i < n; ++i) {
      ids.push_back(e.new_ids[i]);
      positions.push_back(e.prefix_len + i);
      slots.push_back(e.new_slots[i]);
      if (e.all_logits || (i == n - 1 && !e.skip_logits)) logits_rows.push_back(row0 + i);
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
  if (num_future > 0) {
    // Token row i of entry i (one token each) for the leading future-token entries.
    ops::resolve_future_tokens(b.input_ids.slice(0, 0, num_future), b.req_pool_indices.slice(0, 0, num_future),
                               future_tokens_);
  }
  b.seq_lens_cpu = std::move(seq_lens);
  b.req_pool_indices_cpu = std::move(req_idx);
  return b;
}

Tensor ModelRunner::forward(ForwardBatch& batch) {
  if (config_.tp_group != nullptr) {
    return or_end_group([&] {
      if (step_sender_ != nullptr) step_sender_->forward();
      return forward_local(batch);
    });
  }
  return forward_local(batch);
}

Tensor ModelRunner::forward_local(ForwardBatch& batch) {
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
  if (step_sender_ != nullptr) send_sampled_tokens(tokens, batch.req_pool_indices_cpu);
  ops::scatter_tokens(tokens, batch.req_pool_indices, future_tokens_);
}

void ModelRunner::send_sampled_tokens(const Tensor& tokens, const std::vector<int32_t>& req_slots) {
  const Tensor host = tokens.to(Device::cpu()).contiguous();
  const int32_t* t = host.data<int32_t>();
  or_end_group([&] { step_sender_->record_tokens(std::vector<int32_t>(t, t + host.numel()), req_slots); });
}

void ModelRunner::record_sampled_tokens(const Tensor& tokens, const std::vector<int32_t>& req_slots) {
  RLM_CHECK(tokens.numel() == static_cast<int64_t>(req_slots.size()))
      << "record_sampled_tokens: " << tokens.describe() << " for " << req_slots.size() << " request slots";
  if (req_slots.empty()) return;
  if (step_sender_ != nullptr) send_sampled_tokens(tokens, req_slots);
  ops::scatter_tokens(tokens, Tensor::from_vector(req_slots).to(config_.device), future_tokens_);
}

}  // namespace rlm
