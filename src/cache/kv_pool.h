// KV memory: one pool of num_pages * page_size slots per layer, K and V in NHD layout, plus the
// request -> token table (req_to_token). Slot s belongs to page s / page_size. The pool owns the
// tensors; which slots are in use is decided by the page allocator and the prefix cache.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace rlm {

// Dequantization scales of one layer's FP8 KV cache: a stored key is e4m3(k / k_scale) and reads
// back as e4m3 * k_scale (the same for values). 1 for other cache dtypes.
struct KvScales {
  float k = 1.0f;
  float v = 1.0f;
};

struct KVPoolConfig {
  int64_t num_layers = 0;
  int64_t num_pages = 0;
  int64_t page_size = 1;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;    // of the keys
  int64_t v_head_dim = 0;  // of the values; 0: head_dim (split sizes, e.g. MLA's 192/128)
  DType dtype = DType::kF32;  // f32, bf16, f16 or f8e4m3

  int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  Device device = Device::cpu();
};

class KVPool {
 public:
  explicit KVPool(const KVPoolConfig& config);

  const KVPoolConfig& config() const { return config_; }
  int64_t num_slots() const { return config_.num_pages * config_.page_size; }
  int64_t page_size() const { return config_.page_size; }
  // [num_slots, num_kv_heads, head_dim] (k) and [num_slots, num_kv_heads, v_dim()] (v)
  const Tensor& k_buffer(int64_t layer) const;
  const Tensor& v_buffer(int64_t layer) const;
  size_t bytes_per_token() const;  // over all layers, K and V
  // Per-layer scales (all 1 unless set; only an f8e4m3 pool takes others).
  const KvScales& scales(int64_t layer) const;
  // Sets every layer's scales ([num_layers]); fails for a non-fp8 pool unless all are 1.
  void set_scales(const std::vector<KvScales>& scales);

 private:
  KVPoolConfig config_;
  std::vector<Tensor> k_;  // per layer [num_slots, num_kv_heads, head_dim]
  std::vector<Tensor> v_;  // per layer [num_slots, num_kv_heads, v_dim()]
  std::vector<KvScales> scales_;  // [num_layers]
};

// Maps (request slot, position) -> KV slot. Request slots are handed out and returned here.
// The table lives on the host (the scheduler reads it); with a CUDA `device` a device mirror is kept
// for the GPU kv_indices builder: write() records the change, sync_device() applies every change
// since the last sync with one upload and one scatter kernel (call it before a step's metadata).
class ReqToTokenPool {
 public:
  ReqToTokenPool(int64_t max_requests, int64_t max_context_len, Device device = Device::cpu());

  // A free request slot, or -1 when all are taken (state unchanged).
  int32_t alloc();
  void free(int32_t req_slot);
  // Marks `req_slot` in use if it is free (a tensor-parallel rank mirroring rank 0's table).
  void adopt(int32_t req_slot);
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t max_requests() const { return table_.size(0); }
  int64_t max_context_len() const { return table_.size(1); }

  // Writes slots for positions [start, start + slots.size()) of request `req_slot`. With a slot
  // limit set, every slot must be inside [0, limit).
  void write(int32_t req_slot, int64_t start, const std::vector<int32_t>& slots);
  // Slots written from now on must be below `num_slots` (the KV pool's size); 0: no check.
  void set_slot_limit(int64_t num_slots) { slot_limit_ = num_slots; }
  // Applies pending writes to the device mirror (no-op on the CPU or when nothing changed). Not
  // inside a CUDA-graph capture (it uploads from the host).
  void sync_device();
  Device device() const { return device_; }
  // The device mirror (i32 [max_requests, max_context_len] on device()); the host table on the CPU.
  const Tensor& device_table() const { return device_.is_cpu() ? table_ : device_table_; }
  int64_t num_pending_writes() const { return static_cast<int64_t>(pending_.size() / 2); }
  // Reads slots for positions [start, end).
  std::vector<int32_t> read(int32_t req_slot, int64_t start, int64_t end) const;
  const Tensor& table() const { return table_; }  // i32 [max_requests, max_context_len]

 private:
  Tensor table_;         // i32 [max_requests, max_context_len] (host)
  Device device_;
  Tensor device_table_;  // i32 [max_requests, max_context_len] on device_ (CUDA only)
  std::vector<int64_t> pending_;  // (flat index, slot) pairs not yet on the device
  int64_t slot_limit_ = 0;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
};

}  // namespace rlm
