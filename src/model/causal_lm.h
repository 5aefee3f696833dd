// A causal language model: token ids in, logits out, K/V written into the paged pool through the
// batch's attention backend. Concrete architectures live in one file each (llama.cpp, ...).
#pragma once

#include <memory>

#include <optional>
#include <vector>

#include "cache/kv_pool.h"
#include "cache/mamba_pool.h"
#include "core/status.h"
#include "core/tensor.h"
#include "attention/forward_batch.h"
#include "model/model_config.h"
#include "model/weight_source.h"

namespace rlm {

// Shapes of the KV cache a model needs, per layer.
struct KVShape {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  virtual KVShape kv_shape() const = 0;
  // Hybrid linear-attention models: the recurrent state per request (a MambaPool slot); nullopt
  // for pure-attention models.
  virtual std::optional<MambaShape> mamba_shape() const { return std::nullopt; }
  // Per-layer dequantization scales for an FP8 KV cache read from the checkpoint ([num_layers]
  // of kv_shape(); empty: all 1).
  virtual std::vector<KvScales> kv_scales() const { return {}; }
  // Runs one step over batch.input_ids and returns f32 logits [num_outputs, vocab_size] for the
  // token rows listed in batch.logits_indices.
  virtual Tensor forward(const ForwardBatch& batch) = 0;
  // Whether a decode forward may be captured in a CUDA graph (no host synchronisation inside): not
  // for sparse-MoE layers, whose expert grouping reads the per-expert counts back to the host.
  virtual bool cuda_graph_capturable() const { return true; }
  // Moves every weight (and constant table) to `device`; the batch's tensors must live there too.
  virtual void to(Device device) = 0;
  virtual Device device() const = 0;
};

// Builds the model named by config.architecture, loading weights from `weights`.
// Unknown architectures and missing/mis-shaped tensors are errors, not crashes.
StatusOr<std::unique_ptr<CausalLM>> create_model(const ModelConfig& config, WeightSource& weights);
std::vector<std::string> supported_architectures();

}  // namespace rlm
