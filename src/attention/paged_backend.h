// Paged attention backends built on ops::store_kv_cache + ops::paged_attention: page-granular
// CSR metadata (kv_indptr/kv_indices) planned on the host from req_to_token once per step, then
// uploaded to the KV pool's device. `cpu` runs the CPU kernels; `native` runs our CUDA kernels
// (registered only when CUDA is compiled in). The CUDA-graph-safe variant (metadata built on the
// GPU into fixed buffers) replaces the host planning in the CUDA backend work.
#pragma once

#include "attention/attention_backend.h"

namespace rlm {

class PagedAttentionBackend : public AttentionBackend {
 public:
  // `device_type`: the device the KV pool must live on.
  PagedAttentionBackend(std::string name, DeviceType device_type)
      : name_(std::move(name)), device_type_(device_type) {}
  std::string name() const override { return name_; }
  void init_forward_metadata(const ForwardBatch& batch) override;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override;

 private:
  std::string name_;
  DeviceType device_type_;
  Tensor kv_indptr_;   // i32 [batch_size + 1]  pages of each request (on the KV pool's device)
  Tensor kv_indices_;  // i32 [total_pages]
};

}  // namespace rlm
