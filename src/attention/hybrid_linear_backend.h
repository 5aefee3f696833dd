// hybrid_linear: the attention backend of hybrid linear-attention models (Qwen3-Next; SGLang's
// HybridLinearAttnBackend). Full-attention layers go to the wrapped paged backend (cpu, native,
// ...), Gated DeltaNet layers to the linear-attention backend. ModelRunner wraps the configured
// backend in one of these when the model reports a mamba_shape().
#pragma once

#include <memory>

#include "attention/attention_backend.h"
#include "attention/gdn_backend.h"

namespace rlm {

class HybridLinearAttnBackend : public AttentionBackend {
 public:
  HybridLinearAttnBackend(std::unique_ptr<AttentionBackend> full, std::unique_ptr<GatedDeltaNetBackend> linear);

  // "hybrid_linear(<full backend>)".
  std::string name() const override;
  void init_forward_metadata(const ForwardBatch& batch) override;
  // A full-attention layer (layer.layer_id numbers the full-attention layers only).
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override;
  Tensor forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v, const QkPrologue& prologue,
                        const AttentionLayer& layer, const ForwardBatch& batch) override;
  // A Gated DeltaNet layer; see GatedDeltaNetBackend::forward.
  Tensor forward_linear(const LinearAttentionLayer& layer, const Tensor& mixed_qkv, const Tensor& a, const Tensor& b,
                        const ForwardBatch& batch) override;

  void set_cascade_mode(CascadeMode mode) override { full_->set_cascade_mode(mode); }
  CascadeStats cascade_stats() const override { return full_->cascade_stats(); }
  AttentionBackend& full_backend() { return *full_; }
  GatedDeltaNetBackend& linear_backend() { return *linear_; }

 private:
  std::unique_ptr<AttentionBackend> full_;
  std::unique_ptr<GatedDeltaNetBackend> linear_;
};

}  // namespace rlm
