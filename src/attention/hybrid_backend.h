// The `hybrid` attention backend (Mini-SGLang's HybridBackend): one backend for prefill/extend
// batches and another for decode batches, chosen per step by the batch's mode. Made by
// make_attention_backend when `--prefill-attention-backend` and `--decode-attention-backend`
// name different backends.
#pragma once

#include <memory>

#include "attention/attention_backend.h"

namespace rlm {

class HybridAttentionBackend : public AttentionBackend {
 public:
  HybridAttentionBackend(std::unique_ptr<AttentionBackend> prefill, std::unique_ptr<AttentionBackend> decode);
  std::string name() const override;  // "hybrid(prefill=X,decode=Y)"
  void init_forward_metadata(const ForwardBatch& batch) override;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override;
  Tensor forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v, const QkPrologue& prologue,
                        const AttentionLayer& layer, const ForwardBatch& batch) override;
  // CUDA graphs capture decode steps only, so they are the decode backend's business.
  bool supports_cuda_graph() const override { return decode_->supports_cuda_graph(); }
  void init_cuda_graph_state(int64_t max_bs, int64_t max_context_len) override {
    decode_->init_cuda_graph_state(max_bs, max_context_len);
  }
  void set_cuda_graph_mode(bool on) override { decode_->set_cuda_graph_mode(on); }
  void set_cascade_mode(CascadeMode mode) override {
    prefill_->set_cascade_mode(mode);
    decode_->set_cascade_mode(mode);
  }
  CascadeStats cascade_stats() const override { return prefill_->cascade_stats(); }
  AttentionBackend& prefill_backend() { return *prefill_; }
  AttentionBackend& decode_backend() { return *decode_; }

 private:
  std::unique_ptr<AttentionBackend> prefill_;
  std::unique_ptr<AttentionBackend> decode_;
  AttentionBackend* active_ = nullptr;  // the backend planned for the current step
};

// The backend for a runner: `name` for everything, unless prefill_name / decode_name (empty: same
// as name) differ, which gives a HybridAttentionBackend. Unknown names are errors listing the
// available backends.
StatusOr<std::unique_ptr<AttentionBackend>> make_attention_backend(const std::string& name,
                                                                   const std::string& prefill_name,
                                                                   const std::string& decode_name);

}  // namespace rlm
