// CUDA write of new keys/values into the paged KV pool (twin of kernels/cpu/kv_store.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cuda {

// Rows of [*, num_kv_heads, head_dim] with a unit last stride (device memory).
struct KvRows {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t token_stride = 0;  // elements
  int64_t head_stride = 0;   // elements
};

// The out_cache_loc value of a padded row of a CUDA-graph batch: nothing is written for it (only
// inside a DeferredIndexChecks scope; immediate checks reject it like any negative slot).
inline constexpr int64_t kPaddedSlot = -1;

// For every token t: cache[loc[t], h, :] = src[t, h, :] (converted to the cache dtype; f8e4m3
// caches get src / scale rounded by the hardware conversion, nearest even, saturating: the CPU
// twin's bits).
// out_cache_loc: i32/i64 [num_tokens] (element stride loc_stride), validated on the device first:
// a slot outside [0, num_slots) throws rlm::Error naming it, and nothing is written. Inside a
// DeferredIndexChecks scope (index_check.h) bad slots are skipped and recorded instead.
// v and v_cache rows have v_head_dim columns (0: head_dim).
// The immediate check of the slots (outside a DeferredIndexChecks scope, index_check.h): throws
// rlm::Error naming the first one outside [0, num_slots), before anything is launched.
void check_cache_slots(int device, const void* out_cache_loc, DType loc_dtype, int64_t num_tokens,
                       int64_t loc_stride, int64_t num_slots);

void store_kv_cache(int device, const KvRows& k, const KvRows& v, const KvRows& k_cache, const KvRows& v_cache,
                    const void* out_cache_loc, DType loc_dtype, int64_t loc_stride, int64_t num_tokens,
                    int64_t num_kv_heads, int64_t head_dim, int64_t num_slots, float k_scale = 1.0f,
                    float v_scale = 1.0f, int64_t v_head_dim = 0);

}  // namespace rlm::cuda
