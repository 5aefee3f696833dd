#include "attention/hybrid_linear_backend.h"

namespace rlm {

HybridLinearAttnBackend::HybridLinearAttnBackend(std::unique_ptr<AttentionBackend> full,
                                                 std::unique_ptr<GatedDeltaNetBackend> linear)
    : full_(std::move(full)), linear_(std::move(linear)) {
  RLM_CHECK(full_ != nullptr && linear_ != nullptr) << "hybrid_linear needs a full and a linear backend";
}

std::string HybridLinearAttnBackend::name() const { return "hybrid_linear(" + full_->name() + ")"; }

void HybridLinearAttnBackend::init_forward_metadata(const ForwardBatch& batch) {
  full_->init_forward_metadata(batch);
  linear_->init_forward_metadata(batch);
}

Tensor HybridLinearAttnBackend::forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                                        const ForwardBatch& batch) {
  return full_->forward(q, k, v, layer, batch);
}

Tensor HybridLinearAttnBackend::forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const QkPrologue& prologue, const AttentionLayer& layer,
                                               const ForwardBatch& batch) {
  return full_->forward_rotary(q, k, v, prologue, layer, batch);
}

Tensor HybridLinearAttnBackend::forward_linear(const LinearAttentionLayer& layer, const Tensor& mixed_qkv,
                                               const Tensor& a, const Tensor& b, const ForwardBatch& batch) {
  return linear_->forward(layer, mixed_qkv, a, b, batch);
}

}  // namespace rlm
