// The `cpu` attention backend: our CPU paged-attention kernels. With a KV pool in host memory it is
// the CPU engine's backend. With a KV pool on a GPU it is the reference for comparing GPU backends
// (`--attention-backend cpu` on `--device cuda` gives the same greedy tokens as `native`;
// tests/cuda/backend_compare_test.cpp): K/V are stored into the GPU pool with the GPU kernel, then q and the layer's whole K/V
// pool are copied to the host, attended there and the result copied back — exact, and slow by
// design (every layer copies its pool), so it is meant for small models and checks, not serving.
#pragma once

#include "attention/paged_backend.h"

namespace rlm {

class CpuAttentionBackend : public AttentionBackend {
 public:
  CpuAttentionBackend() : host_("cpu", DeviceType::kCPU) {}
  std::string name() const override { return "cpu"; }
  void init_forward_metadata(const ForwardBatch& batch) override;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override;
  // Cascade attention runs for a pool in host memory (the CPU engine); the GPU-pool comparison
  // path keeps the single pass.
  void set_cascade_mode(CascadeMode mode) override { host_.set_cascade_mode(mode); }
  CascadeStats cascade_stats() const override { return host_.cascade_stats(); }

 private:
  PagedAttentionBackend host_;  // the CPU path (pool in host memory)
  bool pool_on_device_ = false;
  Tensor kv_indptr_;   // host i32 [batch_size + 1] (pool on a GPU)
  Tensor kv_indices_;  // host i32 [total_pages]
  Tensor qo_indptr_;   // host copies of the batch's index tensors
  Tensor seq_lens_;
};

}  // namespace rlm
