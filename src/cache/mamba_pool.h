// MambaPool: per-request recurrent state of a hybrid linear-attention model (docs/design/hybrid_radix_cache.md): for
// every Gated DeltaNet layer, a causal-conv state (the last conv_width inputs of the conv) and an
// SSM state (one [head_k_dim, head_v_dim] matrix per value head), both f32. A slot holds one
// request's state at one position; slots are also used for the prefix cache's snapshots.
// Slot 0 .. num_slots-1 are handed out by alloc(); the pool never decides what a slot means.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace rlm {

// What a hybrid model needs per linear-attention layer (CausalLM::mamba_shape()).
struct MambaShape {
  int64_t num_layers = 0;   // linear-attention layers (numbered 0.. in model order)
  int64_t conv_dim = 0;     // channels of the depthwise causal conv (2 * key_dim + value_dim)
  int64_t conv_width = 0;   // conv kernel size - 1: the inputs the conv remembers
  int64_t num_v_heads = 0;
  int64_t head_k_dim = 0;
  int64_t head_v_dim = 0;
  bool operator==(const MambaShape&) const = default;
};

class MambaPool {
 public:
  MambaPool(const MambaShape& shape, int64_t num_slots, Device device = Device::cpu());

  const MambaShape& shape() const { return shape_; }
  int64_t num_slots() const { return num_slots_; }
  Device device() const { return device_; }
  // f32 [num_slots, conv_dim, conv_width]: column j is the input j steps older than the newest
  // kept one, oldest first (column conv_width - 1 is the most recent input).
  const Tensor& conv_state(int64_t layer) const;
  // f32 [num_slots, num_v_heads, head_k_dim, head_v_dim]
  const Tensor& ssm_state(int64_t layer) const;
  size_t bytes_per_slot() const;  // over all layers

  // A free slot, or -1 when none is left (state unchanged). The slot's contents are unspecified.
  int32_t alloc();
  void free(int32_t slot);
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  bool in_use(int32_t slot) const;

  // Marks `slot` in use if it is free (a tensor-parallel rank mirroring rank 0's pool).
  void adopt(int32_t slot);
  // Copies every layer's conv and SSM state of slot src into slot dst (copy-on-write).
  void copy_slot(int32_t src, int32_t dst);
  // Told of every copy_slot (tensor parallelism: rank 0's copies go to the other ranks).
  void set_copy_listener(std::function<void(int32_t src, int32_t dst)> listener) { on_copy_ = std::move(listener); }
  // Sets every layer's state of `slot` to zero (the state before the first token).
  void zero_slot(int32_t slot);

 private:
  void check_slot(int32_t slot, const char* what) const;

  MambaShape shape_;
  int64_t num_slots_ = 0;
  Device device_;
  std::vector<Tensor> conv_;  // per layer [num_slots, conv_dim, conv_width]
  std::vector<Tensor> ssm_;   // per layer [num_slots, num_v_heads, head_k_dim, head_v_dim]
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
  std::function<void(int32_t, int32_t)> on_copy_;
};

}  // namespace rlm
