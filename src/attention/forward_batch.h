// ForwardBatch: everything one model step needs, built by the ModelRunner on the host from the
// scheduler's BatchEntry list. Index tensors live on the model's device; the *_cpu vectors mirror
// them for host-side planning (attention metadata, logits selection).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace rlm {

class AttentionBackend;
class KVPool;
class MambaPool;
class ReqToTokenPool;

enum class ForwardMode : uint8_t {
  kExtend,  // prefill / chunked prefill: each request adds extend_len >= 1 tokens after a prefix
  kDecode,  // every request adds exactly one token
};

// One request's slice of a step: `new_ids` are appended after `prefix_len` cached tokens and
// their K/V go to `new_slots`.
struct BatchEntry {
  int32_t req_slot = 0;
  int32_t prefix_len = 0;
  std::vector<int32_t> new_ids;
  std::vector<int32_t> new_slots;
  bool all_logits = false;  // logits for every new token (else only the last one)
  bool skip_logits = false;  // no logits row at all (a prompt chunk that samples nothing)
  // Hybrid models (see ForwardBatch): the request's working state slot, and an optional snapshot.
  int32_t mamba_slot = -1;
  int32_t mamba_track_slot = -1;
  int32_t mamba_track_pos = 0;
};

// A BatchEntry id standing for the token the previously launched step sampled for the same request
// slot (overlap scheduling): one-token entries only, placed before every other entry; resolved in
// device memory.
inline constexpr int32_t kFutureToken = -1;

struct ForwardBatch {
  ForwardMode mode = ForwardMode::kExtend;
  int64_t batch_size = 0;
  int64_t num_tokens = 0;

  Tensor input_ids;         // i32 [num_tokens]
  Tensor positions;         // i32 [num_tokens]
  Tensor out_cache_loc;     // i32 [num_tokens]  KV slots where this step's K/V are written
  Tensor req_pool_indices;  // i32 [batch_size]  rows of req_to_token
  Tensor seq_lens;          // i32 [batch_size]  KV length after this step (prefix + extend)
  Tensor qo_indptr;         // i32 [batch_size + 1]  token rows of each request
  Tensor logits_indices;    // i32 [num_outputs]  token rows whose logits the model returns

  std::vector<int32_t> seq_lens_cpu;     // [batch_size]
  std::vector<int32_t> extend_lens_cpu;  // [batch_size]  tokens added this step (1 in decode)
  std::vector<int32_t> prefix_lens_cpu;  // [batch_size]  seq_len - extend_len
  std::vector<int32_t> req_pool_indices_cpu;  // [batch_size]

  // Hybrid linear-attention models only (empty otherwise). Each request's working recurrent state
  // lives in MambaPool slot mamba_slots[r]: it holds the state after prefix_len tokens when the step
  // starts (ignored when prefix_len == 0, which starts from the zero state) and the state after
  // seq_len tokens when it ends. When mamba_track_slots_cpu[r] >= 0 the model also copies the state
  // after mamba_track_pos_cpu[r] tokens (prefix_len < pos <= seq_len) into that slot — the
  // snapshot the hybrid prefix cache keeps at chunk-aligned positions.
  Tensor mamba_slots;                          // i32 [batch_size]
  std::vector<int32_t> mamba_slots_cpu;        // [batch_size]
  std::vector<int32_t> mamba_track_slots_cpu;  // [batch_size]  -1: no snapshot
  std::vector<int32_t> mamba_track_pos_cpu;    // [batch_size]

  AttentionBackend* attn_backend = nullptr;
  KVPool* kv_pool = nullptr;
  ReqToTokenPool* req_to_token = nullptr;
  MambaPool* mamba_pool = nullptr;
};

}  // namespace rlm
