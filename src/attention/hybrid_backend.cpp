#include "attention/hybrid_backend.h"

namespace rlm {

HybridAttentionBackend::HybridAttentionBackend(std::unique_ptr<AttentionBackend> prefill,
                                               std::unique_ptr<AttentionBackend> decode)
    : prefill_(std::move(prefill)), decode_(std::move(decode)) {
  RLM_CHECK(prefill_ != nullptr && decode_ != nullptr) << "hybrid attention backend needs two backends";
}

std::string HybridAttentionBackend::name() const {
  return "hybrid(prefill=" + prefill_->name() + ",decode=" + decode_->name() + ")";
}

void HybridAttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  active_ = batch.mode == ForwardMode::kDecode ? decode_.get() : prefill_.get();
  active_->init_forward_metadata(batch);
}

Tensor HybridAttentionBackend::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                                       const ForwardBatch& batch) {
  RLM_CHECK(active_ != nullptr) << "hybrid attention backend: forward() before init_forward_metadata()";
  return active_->forward(q, k, v, layer, batch);
}

Tensor HybridAttentionBackend::forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const QkPrologue& prologue, const AttentionLayer& layer,
                                              const ForwardBatch& batch) {
  RLM_CHECK(active_ != nullptr) << "hybrid attention backend: forward() before init_forward_metadata()";
  return active_->forward_rotary(q, k, v, prologue, layer, batch);
}

StatusOr<std::unique_ptr<AttentionBackend>> make_attention_backend(const std::string& name,
                                                                   const std::string& prefill_name,
                                                                   const std::string& decode_name) {
  const std::string p = prefill_name.empty() ? name : prefill_name;
  const std::string d = decode_name.empty() ? name : decode_name;
  if (p == d) return create_attention_backend(p);
  RLM_ASSIGN_OR_RETURN(std::unique_ptr<AttentionBackend> prefill, create_attention_backend(p));
  RLM_ASSIGN_OR_RETURN(std::unique_ptr<AttentionBackend> decode, create_attention_backend(d));
  return std::unique_ptr<AttentionBackend>(new HybridAttentionBackend(std::move(prefill), std::move(decode)));
}

}  // namespace rlm
