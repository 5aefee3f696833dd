#include "kernels/cuda/rotary.h"

#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda {
namespace {

// One thread per (token, head of q then k, rotation pair); grid-stride. A position outside the cache
// (deferred checks only, see index_check.h) is recorded and its token left unrotated.
__global__ void rotary_kernel(Heads q, Heads k, int64_t num_tokens, const void* positions, bool pos_i64,
                              int64_t pos_stride, const float* cos_sin, int64_t max_positions, int64_t rotary_dim,
                              bool is_neox, DeviceErrorRecord* rec) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t half = rotary_dim / 2;
  const int64_t heads = q.num_heads + k.num_heads;
  const int64_t total = num_tokens * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % heads;
    const int64_t t = idx / (half * heads);
    const Heads& hs = h < q.num_heads ? q : k;
    const int64_t hh = h < q.num_heads ? h : h - q.num_heads;
    float* x = hs.data + t * hs.token_stride + hh * hs.head_stride;
    const int64_t pos = load_index(positions, pos_i64, t, pos_stride);
    if (pos < 0 || pos >= max_positions) {
      if (h == 0 && i == 0) record_index_error(rec, IndexErrorOp::kRotary, t, pos, max_positions);
      continue;
    }
    const float* row = cos_sin + pos * rotary_dim;
    const float c = row[i], s = row[half + i];
    const int64_t a = is_neox ? i : 2 * i;
    const int64_t b = is_neox ? i + half : 2 * i + 1;
    const float x1 = x[a], x2 = x[b];
    x[a] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));  // no FMA contraction: same rounding as the CPU
    x[b] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

void launch_rotary(const Heads& q, const Heads& k, int64_t num_tokens, const void* positions, bool pos_i64,
                   int64_t pos_stride, const float* cos_sin, int64_t max_positions, int64_t rotary_dim, bool is_neox,
                   DeviceErrorRecord* rec, cudaStream_t stream) {
  const int64_t total = num_tokens * (q.num_heads + k.num_heads) * (rotary_dim / 2);
  if (total == 0) return;
  launch_pdl(rotary_kernel, dim3(grid_for(total)), dim3(kBlock), 0, stream, q, k, num_tokens, positions,
             pos_i64, pos_stride, cos_sin, max_positions, rotary_dim, is_neox, rec);
}

// One pair of rotated values: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s), without FMA contraction
// (rotary_kernel's arithmetic).
__device__ __forceinline__ void rotate_pair(float& x1, float& x2, float c, float s) {
  const float a = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  const float b = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  x1 = a;
  x2 = b;
}

template <typename D>
__device__ __forceinline__ D to_cache(float x, float scale) {
  return from_float<D>(std::is_same_v<D, __nv_fp8_e4m3> ? x / scale : x);  // store_kv_cache's arithmetic
}

// Cache rows of one part (keys or values).
template <typename D>
struct CacheRows {
  D* data;
  int64_t ts, hs;
  float scale;
};

// Element i of a norm weight of dtype w_dtype (f32, bf16 or f16), as f32.
__device__ __forceinline__ float norm_weight(const void* w, DType w_dtype, int i) {
  if (w_dtype == DType::kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(w)[i]);
  if (w_dtype == DType::kF16) return __half2float(static_cast<const __half*>(w)[i]);
  return static_cast<const float*>(w)[i];
}

// The arguments of rotary_store_kv_kernel.
template <typename D>
struct FusedArgs {
  Heads q, k;
  const float* v;
  int64_t v_ts, v_hs;
  CacheRows<D> kc, vc;
  int head_dim, v_head_dim, rotary_dim;
  bool is_neox;
  int64_t num_tokens;
  const void* positions;
  bool pos_i64;
  int64_t pos_stride;
  const float* cos_sin;
  int64_t max_positions;
  const void* loc;
  bool loc_i64;
  int64_t loc_stride, num_slots;
  const void* q_norm;  // nullptr: no per-head norms
  const void* k_norm;
  DType norm_dtype;
  float eps;
  DeviceErrorRecord* rec;
};

// A lane's share of a head: rotation pairs i = lane + 32 j (j < P: rotary_dim <= 64 P), columns
// rotary_dim + lane + 32 j past the rotation (j < Q: head_dim - rotary_dim <= 32 Q) and a value
// head's columns lane + 32 j (j < 2 P: v_head_dim <= 64 P). Instantiations: (P, Q) = (2, 0) for
// heads of up to 128 fully rotated (the common case: 4 values a lane), (4, 0) and (4, 8).
constexpr int kFusedThreads = 128, kFusedWarps = kFusedThreads / 32;

// What a lane reads before the PDL wait (written before the layers run, or constant): the token's
// position, its cache slot and the cos / sin of its pairs.
template <int P>
struct FusedPre {
  int64_t pos, slot;
  bool pos_ok;
  float c[P], s[P];
};

template <int P, typename D>
__device__ __forceinline__ FusedPre<P> fused_prefetch(const FusedArgs<D>& a, int64_t t, int lane) {
  FusedPre<P> p;
  p.pos = load_index(a.positions, a.pos_i64, t, a.pos_stride);
  p.slot = load_index(a.loc, a.loc_i64, t, a.loc_stride);
  p.pos_ok = p.pos >= 0 && p.pos < a.max_positions;
  const int half = a.rotary_dim / 2;
  const float* row = a.cos_sin + (p.pos_ok ? p.pos : 0) * a.rotary_dim;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = lane + 32 * j;
    p.c[j] = i < half ? row[i] : 0.0f;
    p.s[j] = i < half ? row[half + i] : 0.0f;
  }
  return p;
}

// Token t of the warp's head (see rotary_store_kv_kernel).
template <int P, int Q, typename D>
__device__ __forceinline__ void fused_token(const FusedArgs<D>& a, int64_t t, const FusedPre<P>& pre,
                                            int head, int lane) {
  const int nq = static_cast<int>(a.q.num_heads), nk = static_cast<int>(a.k.num_heads);
  const int half = a.rotary_dim / 2, pass = a.head_dim - a.rotary_dim;
  const bool slot_ok = pre.slot >= 0 && pre.slot < a.num_slots;
  if (head >= nq + nk) {  // a v head
    const int h = head - nq - nk;
    if (!slot_ok) return;  // recorded by k's first head
    const float* src = a.v + t * a.v_ts + h * a.v_hs;
    D* dst = a.vc.data + pre.slot * a.vc.ts + h * a.vc.hs;
    constexpr int V = 2 * P;  // v_head_dim <= 64 P
    float xv[V];  // every load before the first store (the compiler cannot tell they do not alias)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (lane + 32 * j < a.v_head_dim) xv[j] = src[lane + 32 * j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      if (lane + 32 * j < a.v_head_dim) dst[lane + 32 * j] = to_cache<D>(xv[j], a.vc.scale);
    }
    return;
  }
  const bool is_q = head < nq;
  const int h = is_q ? head : head - nq;
  const Heads& hs = is_q ? a.q : a.k;
  float* x = hs.data + t * hs.token_stride + h * hs.head_stride;
  float x1[P], x2[P], xp[Q > 0 ? Q : 1];
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      x1[j] = x[a.is_neox ? i : 2 * i];
      x2[j] = x[a.is_neox ? i + half : 2 * i + 1];
    }
  }
#pragma unroll
  for (int j = 0; j < Q; ++j) {
    if (lane + 32 * j < pass) xp[j] = x[a.rotary_dim + lane + 32 * j];
  }
  if (a.q_norm != nullptr) {
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      if (lane + 32 * j < half)
        sum += static_cast<double>(x1[j]) * x1[j] + static_cast<double>(x2[j]) * x2[j];
    }
#pragma unroll
    for (int j = 0; j < Q; ++j) {
      if (lane + 32 * j < pass) sum += static_cast<double>(xp[j]) * xp[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float variance = static_cast<float>(sum / static_cast<double>(a.head_dim));
    const float inv = 1.0f / sqrtf(variance + a.eps);
    const void* w = is_q ? a.q_norm : a.k_norm;
#pragma unroll
    for (int j = 0; j < P; ++j) {
      const int i = lane + 32 * j;
      if (i < half) {
        const int c1 = a.is_neox ? i : 2 * i, c2 = a.is_neox ? i + half : 2 * i + 1;
        x1[j] = norm_weight(w, a.norm_dtype, c1) * (x1[j] * inv);
        x2[j] = norm_weight(w, a.norm_dtype, c2) * (x2[j] * inv);
      }
    }
#pragma unroll
    for (int j = 0; j < Q; ++j) {
      const int e = a.rotary_dim + lane + 32 * j;
      if (lane + 32 * j < pass) xp[j] = norm_weight(w, a.norm_dtype, e) * (xp[j] * inv);
    }
  }
  if (!pre.pos_ok && head == 0 && lane == 0) {
    record_index_error(a.rec, IndexErrorOp::kRotary, t, pre.pos, a.max_positions);
  }
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      if (pre.pos_ok) rotate_pair(x1[j], x2[j], pre.c[j], pre.s[j]);
      x[a.is_neox ? i : 2 * i] = x1[j];
      x[a.is_neox ? i + half : 2 * i + 1] = x2[j];
    }
  }
  if (a.q_norm != nullptr) {
#pragma unroll
    for (int j = 0; j < Q; ++j) {
      if (lane + 32 * j < pass) x[a.rotary_dim + lane + 32 * j] = xp[j];
    }
  }
  if (is_q) return;
  if (!slot_ok) {
    if (h == 0 && lane == 0 && pre.slot != kPaddedSlot) {
      record_index_error(a.rec, IndexErrorOp::kKvStore, t, pre.slot, a.num_slots);
    }
    return;
  }
  D* dst = a.kc.data + pre.slot * a.kc.ts + h * a.kc.hs;
#pragma unroll
  for (int j = 0; j < P; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      dst[a.is_neox ? i : 2 * i] = to_cache<D>(x1[j], a.kc.scale);
      dst[a.is_neox ? i + half : 2 * i + 1] = to_cache<D>(x2[j], a.kc.scale);
    }
  }
#pragma unroll
  for (int j = 0; j < Q; ++j) {
    if (lane + 32 * j < pass) dst[a.rotary_dim + lane + 32 * j] = to_cache<D>(xp[j], a.kc.scale);
  }
}

// One warp per (token, head): q's heads, then k's, then v's; grid (ceil(heads / kFusedWarps),
// min(num_tokens, 65535), ceil(num_tokens / 65535)), token blockIdx.y + 65535 blockIdx.z. No loop
// over tokens: a warp's registers stay few (40 at P = 2), so many warps wait on memory at once --
// a token loop kept the arguments live and took 92. A q or k head is read into registers,
// normalised (with norms: rms_norm's arithmetic -- squares summed in double, w * (x * inv)), rotated
// and written back; a k head is also stored with the columns past the rotation; a v head is stored.
// A bad position (deferred checks) leaves its token unrotated and a bad slot unstored, each recorded
// once per token.
template <int P, int Q, typename D>
__global__ void __launch_bounds__(kFusedThreads) rotary_store_kv_kernel(FusedArgs<D> a) {
  const int lane = threadIdx.x % 32;
  const int head = blockIdx.x * kFusedWarps + static_cast<int>(threadIdx.x / 32);
  const int64_t t = blockIdx.y + static_cast<int64_t>(blockIdx.z) * gridDim.y;
  // Nothing to do (whole warps): leave before the wait (an exited block counts as triggered).
  if (t >= a.num_tokens || head >= static_cast<int>(a.q.num_heads + 2 * a.k.num_heads)) return;
  const FusedPre<P> pre = fused_prefetch<P>(a, t, lane);
  pdl_wait();
  pdl_launch_dependents();
  fused_token<P, Q>(a, t, pre, head, lane);
}

// The immediate check of the positions (outside a DeferredIndexChecks scope): throws naming the
// first one outside [0, max_positions), before anything is launched.
void check_positions(int device, const void* positions, DType positions_dtype, int64_t num_tokens,
                     int64_t positions_stride, int64_t max_positions) {
  const BadIndex bad =
      find_out_of_range(device, positions, positions_dtype, num_tokens, positions_stride, max_positions);
  if (bad.position >= 0) {
    fail(str("rotary_embedding: position ", bad.value, " of token ", bad.position,
             " is outside the cos/sin cache [0, ", max_positions, ")"));
  }
}

}  // namespace

bool rotary_store_kv_fits(int64_t head_dim, int64_t rotary_dim, int64_t v_head_dim) {
  return rotary_dim <= 256 && head_dim - rotary_dim <= 256 && v_head_dim <= 256;
}

void rotary_store_kv_cache(int device, const Heads& q, const Heads& k, const KvRows& v, const KvRows& k_cache,
                           const KvRows& v_cache, int64_t num_tokens, const void* positions,
                           DType positions_dtype, int64_t positions_stride, const float* cos_sin,
                           int64_t max_positions, int64_t rotary_dim, bool is_neox, const void* out_cache_loc,
                           DType loc_dtype, int64_t loc_stride, int64_t head_dim, int64_t v_head_dim,
                           int64_t num_slots, float k_scale, float v_scale, const HeadNorms& norms) {
  if (num_tokens == 0) return;
  RLM_CHECK(v.dtype == DType::kF32 && k_cache.dtype == v_cache.dtype)
      << "rotary_store_kv_cache: f32 values and one cache dtype";
  RLM_CHECK(rotary_store_kv_fits(head_dim, rotary_dim, v_head_dim))
      << "rotary_store_kv_cache: head_dim " << head_dim << ", rotary_dim " << rotary_dim << ", v_head_dim "
      << v_head_dim << " past the kernel's";
  RLM_CHECK((norms.q == nullptr) == (norms.k == nullptr))
      << "rotary_store_kv_cache: q and k norms come together";
  RLM_CHECK(norms.q == nullptr || norms.dtype == DType::kF32 || norms.dtype == DType::kBF16 ||
            norms.dtype == DType::kF16)
      << "rotary_store_kv_cache: norm weights of dtype " << dtype_name(norms.dtype);
  DeviceErrorRecord* rec = nullptr;
  if (DeferredIndexChecks::active()) {
    rec = device_error_record(device);
  } else {
    check_positions(device, positions, positions_dtype, num_tokens, positions_stride, max_positions);
    check_cache_slots(device, out_cache_loc, loc_dtype, num_tokens, loc_stride, num_slots);
  }
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const int64_t heads = q.num_heads + 2 * k.num_heads;
  constexpr int64_t kMaxY = 65535;
  const dim3 grid(static_cast<unsigned>((heads + kFusedWarps - 1) / kFusedWarps),
                  static_cast<unsigned>(num_tokens < kMaxY ? num_tokens : kMaxY),
                  static_cast<unsigned>((num_tokens + kMaxY - 1) / kMaxY));
  dispatch_cache(k_cache.dtype, [&](auto d) {
    using D = decltype(d);
    const FusedArgs<D> args{
        q,
        k,
        static_cast<const float*>(v.data),
        v.token_stride,
        v.head_stride,
        {static_cast<D*>(k_cache.data), k_cache.token_stride, k_cache.head_stride, k_scale},
        {static_cast<D*>(v_cache.data), v_cache.token_stride, v_cache.head_stride, v_scale},
        static_cast<int>(head_dim),
        static_cast<int>(v_head_dim),
        static_cast<int>(rotary_dim),
        is_neox,
        num_tokens,
        positions,
        positions_dtype == DType::kI64,
        positions_stride,
        cos_sin,
        max_positions,
        out_cache_loc,
        loc_dtype == DType::kI64,
        loc_stride,
        num_slots,
        norms.q,
        norms.k,
        norms.dtype,
        norms.eps,
        rec};
    auto launch = [&](auto kernel) { launch_pdl(kernel, grid, dim3(kFusedThreads), 0, stream, args); };
    const bool pass = head_dim > rotary_dim, wide = rotary_dim > 128 || v_head_dim > 128;
    if (!pass && !wide)
      launch(rotary_store_kv_kernel<2, 0, D>);
    else if (!pass)
      launch(rotary_store_kv_kernel<4, 0, D>);
    else
      launch(rotary_store_kv_kernel<4, 8, D>);
  });
}

void rotary_embedding(int device, const Heads& q, const Heads& k, int64_t num_tokens, const void* positions,
                      DType positions_dtype, int64_t positions_stride, const float* cos_sin,
                      int64_t max_positions, int64_t rotary_dim, bool is_neox) {
  if (num_tokens == 0) return;
  DeviceErrorRecord* rec = nullptr;
  if (DeferredIndexChecks::active()) {
    rec = device_error_record(device);
  } else {
    check_positions(device, positions, positions_dtype, num_tokens, positions_stride, max_positions);
  }
  launch_rotary(q, k, num_tokens, positions, positions_dtype == DType::kI64, positions_stride, cos_sin, max_positions,
                rotary_dim, is_neox, rec, static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

}  // namespace rlm::cuda
