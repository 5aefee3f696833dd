#include "engine/cuda_graph_runner.h"

#include <algorithm>
#include <numeric>

#include "core/caching_allocator.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/cuda_graph.h"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/kv_store.h"
#endif

namespace rlm {

std::vector<int64_t> cuda_graph_batch_sizes(int64_t max_bs) {
  std::vector<int64_t> sizes;
  for (int64_t s : {1, 2, 4}) {
    if (s <= max_bs) sizes.push_back(s);
  }
  for (int64_t s = 8; s <= max_bs; s += 8) sizes.push_back(s);
  if (max_bs >= 1 && sizes.back() != max_bs) sizes.push_back(max_bs);
  return sizes;
}

int64_t padded_batch_size(const std::vector<int64_t>& sizes, int64_t bs) {
  auto it = std::lower_bound(sizes.begin(), sizes.end(), bs);
  return it == sizes.end() ? -1 : *it;
}

struct CudaGraphRunner::Graph {
#ifdef RADIXLM_WITH_CUDA
  explicit Graph(int device) : graph(device) {}
  cuda::CudaGraph graph;
#else
  explicit Graph(int) {}
#endif
  Tensor logits;  // f32 [bs, vocab], graph-pool memory the graph writes at every replay
};

CudaGraphRunner::CudaGraphRunner(const Deps& deps) : deps_(deps) {}

CudaGraphRunner::~CudaGraphRunner() {
  if (pool_ == 0) return;
  graphs_.clear();  // graph execs first, then their memory
  try {
    device_synchronize(deps_.device);
    cuda_allocator(deps_.device.index).release_private_pool(pool_);
  } catch (const Error&) {
    // A destructor must not throw; the process is tearing down or the device is gone.
  }
}

size_t CudaGraphRunner::pool_bytes() const {
  return cuda_allocator(deps_.device.index).stats().private_pool_bytes;
}

ForwardBatch CudaGraphRunner::capture_batch(int64_t bs) {
  ForwardBatch b;
  b.mode = ForwardMode::kDecode;
  b.batch_size = bs;
  b.num_tokens = bs;
  b.input_ids = input_ids_.slice(0, 0, bs);
  b.positions = positions_.slice(0, 0, bs);
  b.out_cache_loc = out_cache_loc_.slice(0, 0, bs);
  b.req_pool_indices = req_pool_indices_.slice(0, 0, bs);
  b.seq_lens = seq_lens_.slice(0, 0, bs);
  b.qo_indptr = qo_indptr_.slice(0, 0, bs + 1);
  b.logits_indices = logits_indices_.slice(0, 0, bs);
  // Host mirrors of the padding values (the graph-mode backend does not read them).
  b.seq_lens_cpu.assign(bs, 1);
  b.extend_lens_cpu.assign(bs, 1);
  b.prefix_lens_cpu.assign(bs, 0);
  b.req_pool_indices_cpu.assign(bs, 0);
  b.attn_backend = deps_.backend;
  b.kv_pool = deps_.kv_pool;
  b.req_to_token = deps_.req_to_token;
  return b;
}

#ifdef RADIXLM_WITH_CUDA

namespace {

// The five per-step inputs with their padding values, from `src` rows [0, n_real).
void fill_inputs(int device, const Tensor* dst[5], const Tensor* src[5], int64_t n_real, int64_t n_total) {
  const int32_t pads[5] = {0, 0, static_cast<int32_t>(cuda::kPaddedSlot), 0, 1};
  cuda::PadCopy copies[5];
  for (int i = 0; i < 5; ++i) {
    copies[i].dst = dst[i]->data<int32_t>();
    copies[i].src = src != nullptr ? src[i]->data<int32_t>() : nullptr;
    copies[i].pad = pads[i];
  }
  cuda::copy_with_padding(device, copies, 5, n_real, n_total);
}

}  // namespace

void CudaGraphRunner::capture_one(int64_t bs) {
  const int device = deps_.device.index;
  const Tensor* dst[5] = {&input_ids_, &positions_, &out_cache_loc_, &req_pool_indices_, &seq_lens_};
  fill_inputs(device, dst, nullptr, 0, input_ids_.size(0));
  ForwardBatch batch = capture_batch(bs);
  auto graph = std::make_unique<Graph>(device);
  cuda::DeferredIndexChecks deferred;
  deps_.backend->set_cuda_graph_mode(true);
  try {
    // Warm-up (eager): sizes the scratch, loads the kernels, lets cuBLAS pick its algorithms.
    deps_.backend->init_forward_metadata(batch);
    (void)deps_.model->forward(batch);
    device_synchronize(deps_.device);
    CachingAllocator& alloc = cuda_allocator(device);
    alloc.begin_private_pool(pool_);
    try {
      graph->graph.begin_capture();
      deps_.backend->init_forward_metadata(batch);
      graph->logits = deps_.model->forward(batch);
      graph->graph.end_capture();
    } catch (...) {
      graph->graph.abort_capture();
      graph->logits = Tensor();
      alloc.end_private_pool();
      throw;
    }
    alloc.end_private_pool();
  } catch (...) {
    deps_.backend->set_cuda_graph_mode(false);
    throw;
  }
  deps_.backend->set_cuda_graph_mode(false);
  RLM_CHECK(graph->logits.dim() == 2 && graph->logits.size(0) == bs && graph->logits.dtype() == DType::kF32)
      << "the model returned logits " << graph->logits.describe() << " for a decode batch of " << bs;
  // Replay once: the graph must run as captured.
  graph->graph.replay();
  device_synchronize(deps_.device);
  if (auto err = cuda::take_device_error(device)) fail("CUDA-graph warm-up replay: " + *err);
  const size_t index = std::lower_bound(sizes_.begin(), sizes_.end(), bs) - sizes_.begin();
  graphs_[index] = std::move(graph);
}

StatusOr<std::unique_ptr<CudaGraphRunner>> CudaGraphRunner::capture(const Deps& deps, std::vector<int64_t> sizes) {
  if (!deps.device.is_cuda()) return invalid_argument("CUDA graphs need a CUDA device");
  if (deps.model == nullptr || deps.backend == nullptr || deps.kv_pool == nullptr || deps.req_to_token == nullptr) {
    return invalid_argument("CudaGraphRunner::capture: missing model, backend or pools");
  }
  if (!deps.backend->supports_cuda_graph()) {
    return invalid_argument(str("attention backend '", deps.backend->name(), "' does not support CUDA graphs"));
  }
  if (sizes.empty() || sizes.front() < 1 || !std::is_sorted(sizes.begin(), sizes.end()) ||
      std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
    return invalid_argument("CUDA-graph batch sizes must be ascending, distinct and >= 1");
  }
  std::unique_ptr<CudaGraphRunner> r(new CudaGraphRunner(deps));
  r->sizes_ = std::move(sizes);
  r->graphs_.resize(r->sizes_.size());
  const int64_t max_bs = r->sizes_.back();
  std::vector<int32_t> host(static_cast<size_t>(7 * max_bs + 1), 0);
  std::iota(host.begin() + 5 * max_bs, host.begin() + 6 * max_bs + 1, 0);  // qo_indptr
  std::iota(host.begin() + 6 * max_bs + 1, host.end(), 0);                 // logits_indices
  r->buffer_ = Tensor::from_vector(host).to(deps.device);
  Tensor* parts[5] = {&r->input_ids_, &r->positions_, &r->out_cache_loc_, &r->req_pool_indices_, &r->seq_lens_};
  for (int i = 0; i < 5; ++i) *parts[i] = r->buffer_.slice(0, i * max_bs, (i + 1) * max_bs);
  r->qo_indptr_ = r->buffer_.slice(0, 5 * max_bs, 6 * max_bs + 1);
  r->logits_indices_ = r->buffer_.slice(0, 6 * max_bs + 1, 7 * max_bs + 1);
  deps.backend->init_cuda_graph_state(max_bs, deps.req_to_token->max_context_len());
  deps.req_to_token->sync_device();
  r->pool_ = cuda_allocator(deps.device.index).create_private_pool();
  // Largest first: the private pool is sized by the largest graph and the smaller ones reuse it.
  for (size_t i = r->sizes_.size(); i-- > 0;) {
    try {
      r->capture_one(r->sizes_[i]);
    } catch (const Error& e) {
      return Status(StatusCode::kInternal, str("capturing the CUDA graph for decode batch size ", r->sizes_[i],
                                               " failed: ", e.what(), " (--disable-cuda-graph runs eagerly)"));
    }
  }
  return r;
}

bool CudaGraphRunner::can_run(const ForwardBatch& batch) const {
  return batch.mode == ForwardMode::kDecode && batch.batch_size >= 1 && batch.batch_size <= max_batch_size() &&
         batch.num_tokens == batch.batch_size;
}

Tensor CudaGraphRunner::replay(const ForwardBatch& batch) {
  RLM_CHECK(can_run(batch)) << "CudaGraphRunner::replay: a batch of " << batch.batch_size << " tokens "
                            << batch.num_tokens << " does not fit the captured sizes (max " << max_batch_size() << ")";
  const int64_t bs = batch.batch_size;
  const int64_t padded = padded_batch_size(sizes_, bs);
  const Tensor* src[5] = {&batch.input_ids, &batch.positions, &batch.out_cache_loc, &batch.req_pool_indices,
                          &batch.seq_lens};
  for (const Tensor* t : src) {
    RLM_CHECK(t->dtype() == DType::kI32 && t->dim() == 1 && t->size(0) == bs && t->is_contiguous() &&
              t->device() == deps_.device)
        << "CUDA-graph input " << t->describe() << " must be a contiguous i32 [" << bs << "] on "
        << deps_.device.to_string();
  }
  const Tensor* dst[5] = {&input_ids_, &positions_, &out_cache_loc_, &req_pool_indices_, &seq_lens_};
  fill_inputs(deps_.device.index, dst, src, bs, padded);
  const size_t index = std::lower_bound(sizes_.begin(), sizes_.end(), padded) - sizes_.begin();
  Graph& g = *graphs_.at(index);
  g.graph.replay();
  ++num_replays_;
  last_padded_bs_ = padded;
  return g.logits.slice(0, 0, bs).clone();
}

#else  // !RADIXLM_WITH_CUDA

void CudaGraphRunner::capture_one(int64_t) { fail("CUDA graphs: radixlm was built without CUDA"); }

StatusOr<std::unique_ptr<CudaGraphRunner>> CudaGraphRunner::capture(const Deps&, std::vector<int64_t>) {
  return invalid_argument("CUDA graphs need a CUDA build of radixlm");
}

bool CudaGraphRunner::can_run(const ForwardBatch&) const { return false; }

Tensor CudaGraphRunner::replay(const ForwardBatch&) { fail("CUDA graphs: radixlm was built without CUDA"); }

#endif

}  // namespace rlm
