#include "kernels/cuda/kv_store.h"

#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda {
namespace {

// The keys or the values of a store: source rows, cache rows, their width and FP8 scale.
template <typename S, typename D>
struct KvPart {
  const S* src;
  int64_t src_ts, src_hs;
  D* dst;
  int64_t dst_ts, dst_hs;
  int64_t head_dim;
  float scale;
};

// One thread per (token, head, dim) element of the keys, then of the values — one launch for both;
// grid-stride. Slot -1 marks a padded row of a CUDA-graph batch (nothing is written); any other
// slot outside [0, num_slots) is recorded once per token (deferred checks, see index_check.h) and
// skipped.
template <typename S, typename D>
__global__ void store_kv_kernel(KvPart<S, D> k, KvPart<S, D> v, const void* loc, bool loc_i64,
                                int64_t loc_stride, int64_t num_tokens, int64_t num_kv_heads,
                                int64_t num_slots, DeviceErrorRecord* rec) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t k_total = num_tokens * num_kv_heads * k.head_dim;
  const int64_t total = k_total + num_tokens * num_kv_heads * v.head_dim;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_k = idx < k_total;
    const KvPart<S, D>& p = is_k ? k : v;
    const int64_t j = is_k ? idx : idx - k_total;
    const int64_t e = j % p.head_dim;
    const int64_t h = (j / p.head_dim) % num_kv_heads;
    const int64_t t = j / (p.head_dim * num_kv_heads);
    const int64_t slot = load_index(loc, loc_i64, t, loc_stride);
    if (slot < 0 || slot >= num_slots) {
      if (is_k && slot != kPaddedSlot && h == 0 && e == 0) {
        record_index_error(rec, IndexErrorOp::kKvStore, t, slot, num_slots);
      }
      continue;
    }
    const float x = to_float(p.src[t * p.src_ts + h * p.src_hs + e]);
    p.dst[slot * p.dst_ts + h * p.dst_hs + e] =
        from_float<D>(std::is_same_v<D, __nv_fp8_e4m3> ? x / p.scale : x);
  }
}

void launch_store_kv(const KvRows& k, const KvRows& v, const KvRows& k_cache, const KvRows& v_cache,
                     const void* loc, bool loc_i64, int64_t loc_stride, int64_t num_tokens,
                     int64_t num_kv_heads, int64_t head_dim, int64_t v_head_dim, int64_t num_slots,
                     float k_scale, float v_scale, DeviceErrorRecord* rec, cudaStream_t stream) {
  const int64_t total = num_tokens * num_kv_heads * (head_dim + v_head_dim);
  if (total == 0) return;
  RLM_CHECK(k.dtype == v.dtype && k_cache.dtype == v_cache.dtype)
      << "store_kv_cache: keys and values of different dtypes";
  dispatch_float(k.dtype, [&](auto s) {
    using S = decltype(s);
    dispatch_cache(k_cache.dtype, [&](auto d) {
      using D = decltype(d);
      const KvPart<S, D> kp{
          static_cast<const S*>(k.data), k.token_stride,      k.head_stride, static_cast<D*>(k_cache.data),
          k_cache.token_stride,          k_cache.head_stride, head_dim,      k_scale};
      const KvPart<S, D> vp{
          static_cast<const S*>(v.data), v.token_stride,      v.head_stride, static_cast<D*>(v_cache.data),
          v_cache.token_stride,          v_cache.head_stride, v_head_dim,    v_scale};
      launch_pdl(store_kv_kernel<S, D>, dim3(grid_for(total)), dim3(kBlock), 0, stream, kp, vp, loc, loc_i64,
                 loc_stride, num_tokens, num_kv_heads, num_slots, rec);
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
  launch_store_kv(k, v, k_cache, v_cache, out_cache_loc, loc_dtype == DType::kI64, loc_stride, num_tokens,
                  num_kv_heads, head_dim, v_head_dim > 0 ? v_head_dim : head_dim, num_slots, k_scale, v_scale,
                  rec, stream);
}

}  // namespace rlm::cuda
