#include "kernels/cuda/kv_store.h"

#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/index_check.h"

namespace rlm::cuda {
namespace {

// One thread per (token, head, dim) element; grid-stride. Slot -1 marks a padded row of a CUDA-graph
// batch (nothing is written); any other slot outside [0, num_slots) is recorded (deferred checks,
// see index_check.h) and skipped.
template <typename S, typename D>
__global__ void store_kv_kernel(const S* src, int64_t src_ts, int64_t src_hs, D* dst, int64_t dst_ts, int64_t dst_hs,
                                const void* loc, bool loc_i64, int64_t loc_stride, int64_t num_tokens,
                                int64_t num_kv_heads, int64_t head_dim, int64_t num_slots, float scale,
                                DeviceErrorRecord* rec) {
  const int64_t total = num_tokens * num_kv_heads * head_dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = idx % head_dim;
    const int64_t h = (idx / head_dim) % num_kv_heads;
    const int64_t t = idx / (head_dim * num_kv_heads);
    const int64_t slot = load_index(loc, loc_i64, t, loc_stride);
    if (slot < 0 || slot >= num_slots) {
      if (slot != kPaddedSlot && h == 0 && e == 0) record_index_error(rec, IndexErrorOp::kKvStore, t, slot, num_slots);
      continue;
    }
    const float x = to_float(src[t * src_ts + h * src_hs + e]);
    dst[slot * dst_ts + h * dst_hs + e] = from_float<D>(std::is_same_v<D, __nv_fp8_e4m3> ? x / scale : x);
  }
}

void launch_store_kv(const KvRows& src, const KvRows& dst, const void* loc, bool loc_i64, int64_t loc_stride,
                     int64_t num_tokens, int64_t num_kv_heads, int64_t head_dim, int64_t num_slots, float scale,
                     DeviceErrorRecord* rec, cudaStream_t stream) {
  const int64_t total = num_tokens * num_kv_heads * head_dim;
  if (total == 0) return;
  dispatch_float(src.dtype, [&](auto s) {
    using S = decltype(s);
    dispatch_cache(dst.dtype, [&](auto d) {
      using D = decltype(d);
      store_kv_kernel<S, D><<<grid_for(total), kBlock, 0, stream>>>(
          static_cast<const S*>(src.data), src.token_stride, src.head_stride, static_cast<D*>(dst.data),
          dst.token_stride, dst.head_stride, loc, loc_i64, loc_stride, num_tokens, num_kv_heads, head_dim, num_slots,
          scale, rec);
      RLM_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void store_kv_cache(int device, const KvRows& k, const KvRows& v, const KvRows& k_cache, const KvRows& v_cache,
                    const void* out_cache_loc, DType loc_dtype, int64_t loc_stride, int64_t num_tokens,
                    int64_t num_kv_heads, int64_t head_dim, int64_t num_slots, float k_scale, float v_scale,
                    int64_t v_head_dim) {
  if (num_tokens == 0) return;
  DeviceErrorRecord* rec = nullptr;
  if (DeferredIndexChecks::active()) {
    rec = device_error_record(device);
  } else {
    const BadIndex bad = find_out_of_range(device, out_cache_loc, loc_dtype, num_tokens, loc_stride, num_slots);
    if (bad.position >= 0) {
      fail(str("store_kv_cache: out_cache_loc[", bad.position, "] = ", bad.value, " is outside the pool [0, ",
               num_slots, ")"));
    }
  }
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const bool i64 = loc_dtype == DType::kI64;
  launch_store_kv(k, k_cache, out_cache_loc, i64, loc_stride, num_tokens, num_kv_heads, head_dim, num_slots, k_scale,
                  rec, stream);
  launch_store_kv(v, v_cache, out_cache_loc, i64, loc_stride, num_tokens, num_kv_heads,
                  v_head_dim > 0 ? v_head_dim : head_dim, num_slots, v_scale, nullptr, stream);
}

}  // namespace rlm::cuda
