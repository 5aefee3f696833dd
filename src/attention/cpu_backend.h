// The `cpu` attention backend: page-granular CSR metadata (kv_indptr/kv_indices) built from
// req_to_token, KV written with ops::store_kv_cache, attention by ops::paged_attention.
#pragma once

#include "attention/attention_backend.h"

namespace rlm {

class CpuAttentionBackend : public AttentionBackend {
 public:
  std::string name() const override { return "cpu"; }
  void init_forward_metadata(const ForwardBatch& batch) override;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override;

 private:
  Tensor kv_indptr_;   // i32 [batch_size + 1]  pages of each request
  Tensor kv_indices_;  // i32 [total_pages]
};

}  // namespace rlm
