// CudaGraphRunner: decode steps as CUDA-graph replays (docs/design/cuda_graphs.md; SGLang's and
// Mini-SGLang's graph runners). At start-up it captures one graph per batch size in cuda_graph_batch_sizes(max_bs)
// — largest first, each after one eager warm-up run — over fixed-address input buffers; a decode
// batch of bs requests then replays the graph of the next captured size B >= bs:
//
//   1. one kernel copies input_ids, positions, out_cache_loc, req_pool_indices and seq_lens into
//      the fixed buffers, rows [bs, B) padded: id 0, position 0, out_cache_loc -1 (the KV store
//      writes nothing for it), request row 0 with seq_len 1 (reads one valid slot, never writes);
//   2. the graph runs the attention metadata builder (req_to_token's device mirror ->
//      kv_indptr/kv_indices), the whole model and the logits projection;
//   3. the first bs rows of the graph's fixed logits buffer are copied out.
//
// Memory: every allocation made while capturing comes from one private pool of the caching
// allocator shared by all the graphs (they replay one at a time on one stream) and is never handed
// to the eager path. Index checks inside the graphs are deferred (see kernels/cuda/index_check.h).
#pragma once

#include <memory>
#include <vector>

#include "attention/attention_backend.h"
#include "cache/kv_pool.h"
#include "core/status.h"
#include "attention/forward_batch.h"
#include "model/causal_lm.h"

namespace rlm {

// 1, 2, 4, 8, then every multiple of 8 up to max_bs, plus max_bs itself (SGLang's list). Empty
// when max_bs < 1.
std::vector<int64_t> cuda_graph_batch_sizes(int64_t max_bs);
// The smallest size in `sizes` (ascending) that is >= bs; -1 when bs is larger than all of them.
int64_t padded_batch_size(const std::vector<int64_t>& sizes, int64_t bs);

class CudaGraphRunner {
 public:
  struct Deps {
    CausalLM* model = nullptr;
    AttentionBackend* backend = nullptr;  // must support_cuda_graph()
    KVPool* kv_pool = nullptr;
    ReqToTokenPool* req_to_token = nullptr;
    Device device;
  };

  // Captures a graph for every size in `sizes` (ascending, each >= 1). Errors (a CPU device, a
  // backend without graph support, a failed capture) come back as a Status naming the size.
  static StatusOr<std::unique_ptr<CudaGraphRunner>> capture(const Deps& deps, std::vector<int64_t> sizes);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  // A decode batch of 1..max captured size requests.
  bool can_run(const ForwardBatch& batch) const;
  // Replays the graph for `batch` (can_run must hold; req_to_token's mirror must be synced).
  // Returns f32 logits [batch_size, vocab] (a copy: valid after later replays).
  Tensor replay(const ForwardBatch& batch);

  const std::vector<int64_t>& batch_sizes() const { return sizes_; }
  int64_t max_batch_size() const { return sizes_.empty() ? 0 : sizes_.back(); }
  int64_t num_replays() const { return num_replays_; }
  int64_t last_padded_batch_size() const { return last_padded_bs_; }
  // Bytes the graphs' private pool holds (in use or cached).
  size_t pool_bytes() const;

 private:
  struct Graph;
  explicit CudaGraphRunner(const Deps& deps);
  ForwardBatch capture_batch(int64_t bs);
  void capture_one(int64_t bs);

  Deps deps_;
  std::vector<int64_t> sizes_;
  int64_t pool_ = 0;  // CachingAllocator private pool id
  // Fixed inputs (one i32 buffer, sliced): input_ids, positions, out_cache_loc, req_pool_indices,
  // seq_lens [max_bs] each, qo_indptr [max_bs + 1] = 0..max_bs, logits_indices [max_bs] = 0..max_bs-1.
  Tensor buffer_;
  Tensor input_ids_, positions_, out_cache_loc_, req_pool_indices_, seq_lens_, qo_indptr_, logits_indices_;
  std::vector<std::unique_ptr<Graph>> graphs_;  // parallel to sizes_
  int64_t num_replays_ = 0;
  int64_t last_padded_bs_ = 0;
};

}  // namespace rlm
