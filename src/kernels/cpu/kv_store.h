// CPU write of new keys/values into the paged KV pool (reshape_and_cache).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cpu {

// Source or destination rows of [*, num_kv_heads, head_dim] with a unit last stride.
struct KvRows {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t token_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
};

// For every token t: cache[loc[t], h, :] = src[t, h, :] (converted from src dtype to cache dtype;
// an f8e4m3 cache gets f32_to_f8e4m3(src / scale) with k_scale for keys, v_scale for values).
// All slots are validated (0 <= loc < num_slots) before anything is written.
//   k: [num_tokens, num_kv_heads, head_dim]; k_cache: [num_slots, num_kv_heads, head_dim];
//   v, v_cache: the same with v_head_dim (0: head_dim) columns.
void store_kv_cache(const KvRows& k, const KvRows& v, const KvRows& k_cache, const KvRows& v_cache,
                    const int64_t* out_cache_loc, int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                    int64_t num_slots, float k_scale = 1.0f, float v_scale = 1.0f, int64_t v_head_dim = 0);

}  // namespace rlm::cpu
