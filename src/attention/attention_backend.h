// The attention-backend contract (SGLang's AttentionBackend, Mini-SGLang's backend interface). A backend prepares index metadata
// once per step and runs the attention kernels; it owns neither KV memory nor scheduling nor
// sampling. Backends register by name; `--attention-backend NAME` picks one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention/cascade_plan.h"
#include "attention/forward_batch.h"
#include "cache/kv_pool.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace rlm {

struct LinearAttentionLayer;

// The per-layer attention parameters (SGLang's RadixAttention role): models describe each
// attention layer with one of these and never see backend details.
struct AttentionLayer {
  int64_t layer_id = 0;
  int64_t num_qo_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  ops::AttentionParams params;  // scale, sliding window, logit soft-cap
};

// The layer's attention parameters with its KV pool's per-layer FP8 scales (see KVPool::scales).
ops::AttentionParams pool_attention_params(const AttentionLayer& layer, const KVPool& pool);

// What a model does to q and k between the QKV projection and attention: optional per-head
// RMSNorms (Qwen3 / Gemma 3 q_norm and k_norm, ops::rms_norm), then the rotary embedding
// (ops::rotary_embedding with these positions, cos/sin cache and pair layout).
struct QkPrologue {
  const Tensor* positions = nullptr;
  const Tensor* cos_sin = nullptr;
  bool is_neox = true;
  const Tensor* q_norm = nullptr;  // both or neither: [head_dim]
  const Tensor* k_norm = nullptr;
  float norm_eps = 0.0f;
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string name() const = 0;
  // Once per step, before the model runs: builds kv_indptr/kv_indices (or a page table) from
  // req_to_token for the batch's requests.
  virtual void init_forward_metadata(const ForwardBatch& batch) = 0;
  // Writes k, v into the KV pool at batch.out_cache_loc, then attends q over each request's KV.
  //   q: [num_tokens, num_qo_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
  //   returns [num_tokens, num_qo_heads, head_dim] (f32 on the CPU).
  virtual Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                         const ForwardBatch& batch) = 0;
  // The prologue in place on q and k (the per-head norms if any, then the rotary embedding: the
  // ops in turn), then forward(q, k, v, layer, batch). A backend may run the prologue and its KV
  // store as one kernel (the CUDA paged backend does: ops::rotary_store_kv_cache).
  virtual Tensor forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v, const QkPrologue& prologue,
                                const AttentionLayer& layer, const ForwardBatch& batch);
  // A Gated DeltaNet (linear-attention) layer of a hybrid model: see GatedDeltaNetBackend::forward
  // for the shapes. Only the hybrid_linear backend has such layers; every other backend fails with
  // an error naming itself.
  virtual Tensor forward_linear(const LinearAttentionLayer& layer, const Tensor& mixed_qkv, const Tensor& a,
                                const Tensor& b, const ForwardBatch& batch);

  // CUDA graphs for decode. A backend that supports them keeps fixed-address metadata
  // buffers for up to max_bs requests; while graph mode is on, init_forward_metadata builds the
  // metadata on the device into those buffers from batch.req_pool_indices / batch.seq_lens (no
  // host data, no host sync, no allocation that depends on the lengths) and forward runs with a
  // plan that depends on the batch size only — so the same calls are captured and replayed.
  virtual bool supports_cuda_graph() const { return false; }
  virtual void init_cuda_graph_state(int64_t max_bs, int64_t max_context_len) {}
  virtual void set_cuda_graph_mode(bool on) {}

  // Cascade attention for extend steps (attention/cascade_plan.h); backends without it ignore this.
  virtual void set_cascade_mode(CascadeMode mode) {}
  // Counters since creation: extend steps run as cascade attention, those with a shared-prefix
  // group, and the prefix keys not re-read thanks to groups (per layer and head, summed per step).
  struct CascadeStats {
    int64_t cascade_steps = 0;
    int64_t grouped_steps = 0;
    int64_t saved_prefix_reads = 0;
  };
  virtual CascadeStats cascade_stats() const { return {}; }
};

using AttentionBackendFactory = std::function<std::unique_ptr<AttentionBackend>()>;

// Registers a backend under `name` (called from each backend's .cpp at static-init time).
bool register_attention_backend(const std::string& name, AttentionBackendFactory factory);
StatusOr<std::unique_ptr<AttentionBackend>> create_attention_backend(const std::string& name);
std::vector<std::string> attention_backend_names();

}  // namespace rlm
