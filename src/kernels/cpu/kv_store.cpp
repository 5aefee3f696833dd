#include "kernels/cpu/kv_store.h"

#include <cstring>
#include <vector>

#include "core/check.h"

namespace rlm::cpu {
namespace {

char* at(const KvRows& r, int64_t token, int64_t head) {
  return static_cast<char*>(r.data) +
         static_cast<size_t>(token * r.token_stride + head * r.head_stride) * dtype_size(r.dtype);
}

void copy_rows(const KvRows& src, const KvRows& dst, const int64_t* loc, int64_t num_tokens, int64_t num_kv_heads,
               int64_t head_dim, float scale) {
  std::vector<float> tmp(static_cast<size_t>(head_dim));
  const size_t bytes = static_cast<size_t>(head_dim) * dtype_size(src.dtype);
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      const char* s = at(src, t, h);
      char* d = at(dst, loc[t], h);
      if (src.dtype == dst.dtype) {
        std::memmove(d, s, bytes);
      } else {
        convert_to_f32(s, src.dtype, tmp.data(), tmp.size());
        if (dst.dtype == DType::kF8E4M3) {
          for (float& x : tmp) x /= scale;
        }
        convert_from_f32(tmp.data(), d, dst.dtype, tmp.size());
      }
    }
  }
}

}  // namespace

void store_kv_cache(const KvRows& k, const KvRows& v, const KvRows& k_cache, const KvRows& v_cache,
                    const int64_t* out_cache_loc, int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim,
                    int64_t num_slots, float k_scale, float v_scale, int64_t v_head_dim) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (out_cache_loc[t] < 0 || out_cache_loc[t] >= num_slots) {
      fail(str("store_kv_cache: out_cache_loc[", t, "] = ", out_cache_loc[t], " is outside the pool [0, ", num_slots,
               ")"));
    }
  }
  copy_rows(k, k_cache, out_cache_loc, num_tokens, num_kv_heads, head_dim, k_scale);
  copy_rows(v, v_cache, out_cache_loc, num_tokens, num_kv_heads, v_head_dim > 0 ? v_head_dim : head_dim, v_scale);
}

}  // namespace rlm::cpu
