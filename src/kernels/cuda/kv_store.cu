#include "kernels/cuda/kv_store.h"

#include <cstdint>
#include <cstring>
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

// Four consecutive elements as f32 (16 bytes of f32, 8 of bf16/f16: aligned, see vec_aligned).
template <typename S>
__device__ __forceinline__ void load4(const S* p, float (&x)[4]) {
  if constexpr (std::is_same_v<S, float>) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    S e[4];
    static_assert(sizeof(e) == sizeof(u), "four 16-bit values");
    memcpy(e, &u, sizeof(u));
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = to_float(e[i]);
  }
}

// Four values converted with from_float<D> element by element (the scalar kernel's arithmetic),
// written with one store of 4 x sizeof(D) bytes.
template <typename D>
__device__ __forceinline__ void store4(D* p, const float (&x)[4]) {
  D e[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = from_float<D>(x[i]);
  if constexpr (sizeof(D) == 4) {
    *reinterpret_cast<float4*>(p) = *reinterpret_cast<const float4*>(e);
  } else if constexpr (sizeof(D) == 2) {
    uint2 u;
    memcpy(&u, e, sizeof(u));
    *reinterpret_cast<uint2*>(p) = u;
  } else {
    uint32_t u;
    memcpy(&u, e, sizeof(u));
    *reinterpret_cast<uint32_t*>(p) = u;
  }
}

// The same store, 4 elements a thread per token: grid (ceil(units / kVecThreads), min(ceil(num_tokens
// / kVecTokens), 65535)), units = 4-element pieces of a token's keys then values; a thread takes its
// piece of kVecTokens consecutive tokens at a time (blockIdx.y strides over such groups), with all
// their source and slot loads issued before any store. Needs head sizes, strides and base pointers
// that keep every piece aligned (vec_aligned); 32-bit index arithmetic within a token. The scalar
// kernel computed three 64-bit divisions per element: a prefill step of 8,192 tokens of
// Llama-3.1-8B spent ~570 us per layer in it on an H100 (docs/perf/serving_matrix.md).
constexpr int kVecThreads = 128;
constexpr int kVecTokens = 4;

template <typename S, typename D>
__global__ void __launch_bounds__(kVecThreads)
    store_kv_vec_kernel(KvPart<S, D> k, KvPart<S, D> v, const void* loc, bool loc_i64, int64_t loc_stride,
                        int64_t num_tokens, int num_kv_heads, int64_t num_slots, DeviceErrorRecord* rec) {
  pdl_wait();
  pdl_launch_dependents();
  const int k_per_head = static_cast<int>(k.head_dim / 4), v_per_head = static_cast<int>(v.head_dim / 4);
  const int k_units = num_kv_heads * k_per_head;
  const int u = blockIdx.x * kVecThreads + threadIdx.x;
  if (u >= k_units + num_kv_heads * v_per_head) return;
  const bool is_k = u < k_units;
  const KvPart<S, D>& p = is_k ? k : v;
  const int per_head = is_k ? k_per_head : v_per_head;
  const int j = is_k ? u : u - k_units;
  const int h = j / per_head, e = (j - h * per_head) * 4;
  const S* src = p.src + h * p.src_hs + e;
  D* dst = p.dst + h * p.dst_hs + e;
  for (int64_t t0 = blockIdx.y * int64_t{kVecTokens}; t0 < num_tokens;
       t0 += gridDim.y * int64_t{kVecTokens}) {
    float x[kVecTokens][4];
    int64_t slot[kVecTokens];
#pragma unroll
    for (int i = 0; i < kVecTokens; ++i) {  // every load before any store (the stores may alias)
      if (t0 + i < num_tokens) {
        load4(src + (t0 + i) * p.src_ts, x[i]);
        slot[i] = load_index(loc, loc_i64, t0 + i, loc_stride);
      }
    }
#pragma unroll
    for (int i = 0; i < kVecTokens; ++i) {
      if (t0 + i >= num_tokens) break;
      if (slot[i] < 0 || slot[i] >= num_slots) {
        if (u == 0 && slot[i] != kPaddedSlot)
          record_index_error(rec, IndexErrorOp::kKvStore, t0 + i, slot[i], num_slots);
        continue;
      }
      if constexpr (std::is_same_v<D, __nv_fp8_e4m3>) {
#pragma unroll
        for (int c = 0; c < 4; ++c) x[i][c] = x[i][c] / p.scale;  // the scalar kernel's arithmetic
      }
      store4(dst + slot[i] * p.dst_ts, x[i]);
    }
  }
}

// Whether the 4-element pieces of a part stay aligned: head size, strides and base.
template <typename S, typename D>
bool vec_aligned(const KvPart<S, D>& p) {
  return p.head_dim % 4 == 0 && p.src_ts % 4 == 0 && p.src_hs % 4 == 0 && p.dst_ts % 4 == 0 &&
         p.dst_hs % 4 == 0 && reinterpret_cast<uintptr_t>(p.src) % (4 * sizeof(S)) == 0 &&
         reinterpret_cast<uintptr_t>(p.dst) % (4 * sizeof(D)) == 0;
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
      const int64_t units = num_kv_heads * (head_dim + v_head_dim) / 4;
      if (vec_aligned(kp) && vec_aligned(vp) && units <= int64_t{1} << 30) {
        const int64_t groups = (num_tokens + kVecTokens - 1) / kVecTokens;
        const dim3 grid(static_cast<unsigned>((units + kVecThreads - 1) / kVecThreads),
                        static_cast<unsigned>(groups < 65535 ? groups : 65535));
        launch_pdl(store_kv_vec_kernel<S, D>, grid, dim3(kVecThreads), 0, stream, kp, vp, loc, loc_i64,
                   loc_stride, num_tokens, static_cast<int>(num_kv_heads), num_slots, rec);
      } else {
        launch_pdl(store_kv_kernel<S, D>, dim3(grid_for(total)), dim3(kBlock), 0, stream, kp, vp, loc,
                   loc_i64, loc_stride, num_tokens, num_kv_heads, num_slots, rec);
      }
    });
  });
}

}  // namespace

void check_cache_slots(int device, const void* out_cache_loc, DType loc_dtype, int64_t num_tokens,
                       int64_t loc_stride, int64_t num_slots) {
  const BadIndex bad = find_out_of_range(device, out_cache_loc, loc_dtype, num_tokens, loc_stride, num_slots);
  if (bad.position >= 0) {
    fail(str("store_kv_cache: out_cache_loc[", bad.position, "] = ", bad.value, " is outside the pool [0, ",
             num_slots, ")"));
  }
}

void store_kv_cache(int device, const KvRows& k, const KvRows& v, const KvRows& k_cache, const KvRows& v_cache,
                    const void* out_cache_loc, DType loc_dtype, int64_t loc_stride, int64_t num_tokens,
                    int64_t num_kv_heads, int64_t head_dim, int64_t num_slots, float k_scale, float v_scale,
                    int64_t v_head_dim) {
  if (num_tokens == 0) return;
  DeviceErrorRecord* rec = nullptr;
  if (DeferredIndexChecks::active()) {
    rec = device_error_record(device);
  } else {
    check_cache_slots(device, out_cache_loc, loc_dtype, num_tokens, loc_stride, num_slots);
  }
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  launch_store_kv(k, v, k_cache, v_cache, out_cache_loc, loc_dtype == DType::kI64, loc_stride, num_tokens,
                  num_kv_heads, head_dim, v_head_dim > 0 ? v_head_dim : head_dim, num_slots, k_scale, v_scale,
                  rec, stream);
}

}  // namespace rlm::cuda
