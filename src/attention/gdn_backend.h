// The linear-attention backend for Gated DeltaNet layers (docs/design/qwen3_next.md;
// SGLang's GDNAttnBackend): once per step it turns the batch's hybrid fields (mamba slots, prefix lengths,
// snapshot requests) into ops::StateSegments on the state pool's device; per layer it runs the
// causal conv over the projected q/k/v, the gates and the gated delta rule — recurrent when
// every request adds one token (decode), chunked otherwise; a mixed step's leading one-token
// (decode) entries take the recurrent rule and the rest the chunked one — reading and writing the
// request's MambaPool slot. It owns no state memory: the MambaPool does.
#pragma once

#include <string>

#include "core/tensor.h"
#include "attention/forward_batch.h"
#include "ops/linear_attention_ops.h"

namespace rlm {

// One Gated DeltaNet layer's parameters that the backend needs (the model owns the projections).
struct LinearAttentionLayer {
  int64_t layer_id = 0;  // among the linear-attention layers: the MambaPool layer
  int64_t num_k_heads = 0;
  int64_t num_v_heads = 0;
  int64_t head_k_dim = 0;
  int64_t head_v_dim = 0;
  Tensor conv_weight;  // [conv_dim, kernel_size], conv_dim = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim
  Tensor A_log;        // [num_v_heads]
  Tensor dt_bias;      // [num_v_heads]
  int64_t key_dim() const { return num_k_heads * head_k_dim; }
  int64_t value_dim() const { return num_v_heads * head_v_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

class GatedDeltaNetBackend {
 public:
  std::string name() const { return "gdn"; }
  // Builds the per-step segments from batch.qo_indptr, mamba_slots(_cpu), prefix_lens_cpu and
  // mamba_track_slots_cpu / mamba_track_pos_cpu. Requires batch.mamba_pool.
  void init_forward_metadata(const ForwardBatch& batch);
  // mixed_qkv: f32 [num_tokens, conv_dim] (channels q | k | v as HF's mixed_qkv; unit last stride);
  // a, b: f32 [num_tokens, num_v_heads] (the dt and beta projections).
  // Returns the core attention output f32 [num_tokens, num_v_heads, head_v_dim].
  Tensor forward(const LinearAttentionLayer& layer, const Tensor& mixed_qkv, const Tensor& a, const Tensor& b,
                 const ForwardBatch& batch);
  bool uses_recurrent() const { return recurrent_; }

 private:
  ops::StateSegments segments_;
  bool recurrent_ = false;  // every request adds exactly one token
  // Mixed steps: entries [0, num_decode_) add one token each and run recurrently (decode_segments_),
  // the rest chunked (extend_segments_, rows counted from the first chunk row). 0: no split.
  int64_t num_decode_ = 0;
  ops::StateSegments decode_segments_;
  ops::StateSegments extend_segments_;
};

}  // namespace rlm
