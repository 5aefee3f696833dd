// Skinny GEMM for decode: out[m, n] = round(x)[m, k] @ W[n, k]^T with m <= 8 and 16-bit W.
// CUDA-core kernel (1-2 rows, and 3-8 where the tensor-core one does not apply): each warp owns R
// consecutive output rows (columns j of out) at a time and streams their weight rows with 16-byte
// non-allocating loads (8 values), R * U loads in flight per lane; x is rounded to the weight dtype
// once per block into shared memory ([m][k], 16-byte vectors read conflict-free by consecutive
// lanes); every lane keeps f32 partial sums for its R x m outputs, reduced by a fixed xor-shuffle
// tree (deterministic). The grid gives every warp the same number of row groups (balanced tail).
// Tensor-core kernel (3-8 rows, sm_80+, k % 32 == 0): gemv_mma_kernel below. No atomics, no
// allocation: both capturable in a CUDA graph.
#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/gemv_fusion.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda {
namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kThreads = kWarps * 32;
constexpr int kBlocksPerSm = 2;

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// The 8 16-bit values packed in v, widened to f32 (exact).
template <typename T>
__device__ __forceinline__ void widen8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * q] = __uint_as_float(w[q] << 16);
      f[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
    } else {
      __half2 h;
      static_assert(sizeof(h) == sizeof(uint32_t));
      memcpy(&h, &w[q], sizeof(h));
      const float2 p = __half22float2(h);
      f[2 * q] = p.x;
      f[2 * q + 1] = p.y;
    }
  }
}

// R rows per warp per group, U 16-byte loads per row per lane in flight; iters row groups per warp.
// The fusions (gemv_fusion.h): kNorm normalizes the rows of x as they are staged; kSilu pairs
// weight rows g and g + n / 2 in a group (R = 2) and writes silu(gate) * up to column g;
// f.accumulate adds into out.
template <typename T, int M, int R, int U, bool kNorm = false, bool kSilu = false>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    gemv_kernel(const float* __restrict__ x, int64_t k, int64_t ldx, const T* __restrict__ w, int64_t n,
                int64_t ldw, const void* __restrict__ bias, DType bias_dtype, float* __restrict__ out,
                int64_t ldo, int64_t iters, GemvFusion f) {
  static_assert(!kSilu || R == 2);
  extern __shared__ uint4 xs[];  // [M][kv]: x rounded to T, 8 values per vector
  const int64_t kv = k / 8;
  const int lane = threadIdx.x % 32;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  const int64_t total_warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t half = n / 2;  // kSilu: the gate rows
  const int64_t groups = kSilu ? half : (n + R - 1) / R;
  // Weight row r of group g (a row past n re-reads the last one).
  auto row_of = [&](int64_t g, int r) -> int64_t {
    if constexpr (kSilu) return g + r * half;
    return g * R + r < n ? g * R + r : n - 1;
  };

  // Weights are constant, so they are read before the wait for the kernel that writes x (PDL):
  // for m <= 2, the first group's first 32 * U vectors per row into registers (when the rows have
  // that many) and the next 32 * U into L2; for larger m (more accumulators; registers would
  // spill) the first 32 * U into L2.
  const bool preloaded = M <= 2 && warp < groups && kv >= 32 * U;
  uint4 first[M <= 2 ? U : 1][R];
  if (warp < groups) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint4* wr = reinterpret_cast<const uint4*>(w + row_of(warp, r) * ldw);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if constexpr (M <= 2) {
          if (preloaded) first[u][r] = load_stream16(wr + lane + 32 * u);
        }
        const int64_t next = preloaded ? lane + 32 * (U + u) : lane + 32 * u;
        if (next < kv) prefetch_l2(wr + next);
      }
    }
  }
  // kNorm with x of at most kNormVecs 8-value vectors a thread: the sums of squares come from the
  // registers that stage x (one read of x); else the block computes them first.
  constexpr int kNormVecs = 4;
  const bool one_pass = M * kv <= kThreads * kNormVecs;
  if (kNorm && one_pass) {  // the norm weights the thread will need, into L1 before the wait
    for (int64_t idx = threadIdx.x; idx < M * kv; idx += kThreads) prefetch_norm_weight(f, (idx % kv) * 8);
  }
  pdl_wait();
  pdl_launch_dependents();
  // x's 8 values at vector idx, rounded to T into shared memory.
  auto stage = [&](int64_t idx, const float(&v)[8]) {
    T t[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) t[e] = from_float<T>(v[e]);
    uint4 packed;
    memcpy(&packed, t, sizeof(packed));
    xs[idx] = packed;
  };
  auto load8 = [&](int64_t idx, float(&v)[8]) {
    const float* src = x + (idx / kv) * ldx + (idx % kv) * 8;
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = src[e];
  };
  float inv[M];  // kNorm only
  if (kNorm && one_pass) {
    float v[kNormVecs][8];
    double sq[M] = {};
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int64_t idx = threadIdx.x + u * kThreads;
      if (idx < M * kv) {
        load8(idx, v[u]);
        add_squares<M>(sq, idx / kv, v[u]);
      }
    }
    inv_rms_from_squares<M>(sq, k, f.eps, inv);
    timeline_mark(0);
#pragma unroll
    for (int u = 0; u < kNormVecs; ++u) {
      const int64_t idx = threadIdx.x + u * kThreads;
      if (idx < M * kv) {
        normalize8<M>(v[u], inv, idx / kv, f, (idx % kv) * 8);
        stage(idx, v[u]);
      }
    }
  } else {
    if (kNorm) rows_inv_rms<M>(x, k, ldx, f.eps, inv);
    timeline_mark(0);
    for (int64_t idx = threadIdx.x; idx < M * kv; idx += kThreads) {
      float v[8];
      load8(idx, v);
      if constexpr (kNorm) normalize8<M>(v, inv, idx / kv, f, (idx % kv) * 8);
      stage(idx, v);
    }
  }
  __syncthreads();
  timeline_mark(1);

  for (int64_t it = 0; it < iters; ++it) {
    const int64_t g = warp + it * total_warps;
    if (g >= groups) break;  // warp-uniform; no barrier follows
    const int64_t row0 = g * R;
    const uint4* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint4*>(w + row_of(g, r) * ldw);
    float acc[R][M], prev[R][M];  // prev: the out values an accumulating store adds to, read early
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
        acc[r][i] = 0.0f;
        const bool mine = kSilu ? r == 0 && lane == i : lane == (r * M + i) % 32 && row0 + r < n;
        prev[r][i] = load_prev(out, i * ldo + (kSilu ? g : row0 + r), f.accumulate && mine);
      }
    }
    auto step = [&](const uint4 (&wv)[R], int64_t v) {
      float wf[R][8];
#pragma unroll
      for (int r = 0; r < R; ++r) widen8<T>(wv[r], wf[r]);
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float xf[8];
        widen8<T>(xs[i * kv + v], xf);
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][i] = fmaf(xf[e], wf[r][e], acc[r][i]);
        }
      }
    };
    int64_t v = lane;
    if constexpr (M <= 2) {
      if (it == 0 && preloaded) {
#pragma unroll
        for (int u = 0; u < U; ++u) step(first[u], v + 32 * u);
        v += 32 * U;
      }
    }
    for (; v + 32 * (U - 1) < kv; v += 32 * U) {
      uint4 wv[U][R];
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = load_stream16(wr[r] + v + 32 * u);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) step(wv[u], v + 32 * u);
    }
    for (; v < kv; v += 32) {
      uint4 wv[R];
#pragma unroll
      for (int r = 0; r < R; ++r) wv[r] = load_stream16(wr[r] + v);
      step(wv, v);
    }
    float sums[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float s = acc[r][i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const int64_t j = kSilu ? row_of(g, r) : row0 + r;
        sums[r][i] = bias != nullptr ? s + load_as_float(bias, bias_dtype, j) : s;
      }
    }
    if constexpr (kSilu) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (lane == i)
          store_out(out, i * ldo + g, silu_mul(sums[0][i], sums[1][i]), f.accumulate, prev[0][i]);
      }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int i = 0; i < M; ++i) {
          const int64_t j = row0 + r;
          if (lane == (r * M + i) % 32 && j < n)
            store_out(out, i * ldo + j, sums[r][i], f.accumulate, prev[r][i]);
        }
      }
    }
  }
  timeline_mark(3);
}

// Tensor-core skinny GEMM for 3-8 rows of x (sm_80+, k % 32 == 0): one block of W warps per 8
// weight rows; the weight rows are the m16n8k16 MMA's n = 8 columns (B) and the rows of x its first
// 8 of 16 rows (A; rows 8-15 are zero). The 32-column chunks of k go to the warps in turn (chunk c
// to warp c % W, so a block reads each row's bytes in order), U chunks per round. Lane (g, t) =
// (lane / 4, lane % 4) loads 16 bytes at columns 32c + 8t of weight row g and the 8 f32 of x row g
// at the same columns, rounded to T as the CUDA-core kernel rounds them (zero for g >= m); as the
// sum over k may visit the columns in any order, words 0-1 and 2-3 of those 8 values are the lane's
// B and A fragments of two MMAs. Products are exact in f32 and summed in f32 by the tensor cores in
// their order; the warps' sums meet in shared memory in a fixed order. Each warp's first round of
// weights is read before the PDL wait. The FP8 GEMV's layout (fp8_linear.cu), with no shared-memory
// copy of x: each lane reads its own x values (through L1).
// Measured on an H100 (docs/perf/gemv.md, last section): 8-row blocks beat 16- and
// 32-row ones (which read x fewer times) at 2-8 rows, and the CUDA-core kernel stays faster at 1-2.
template <typename T, int W, int U, bool XVec>
__global__ void __launch_bounds__(W * 32)
    gemv_mma_kernel(const float* __restrict__ x, int m, int64_t k, int64_t ldx, const T* __restrict__ w,
                    int64_t n, int64_t ldw, const void* __restrict__ bias, DType bias_dtype,
                    float* __restrict__ out, int64_t ldo) {
  using attn::Mma;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 8;
  const T* wr = w + min(row0 + g, n - 1) * ldw + t * 8;  // rows past n re-read the last
  const bool has_x = g < m;
  const float* xr = x + (has_x ? g : 0) * ldx + t * 8;
  const int64_t chunks = k / 32;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // c0, c1: (x row g, weight rows 2t, 2t + 1); c2, c3: zero rows
  uint4 vw[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = warp + static_cast<int64_t>(u) * W;
    if (c < chunks) vw[u] = load_stream16(wr + c * 32);
  }
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t c0 = warp; c0 < chunks; c0 += static_cast<int64_t>(U) * W) {
    uint32_t xa[U][4];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * W;
      float f[8];
      if (has_x && c < chunks) {
        const float* src = xr + c * 32;
        if constexpr (XVec) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float4 v = *reinterpret_cast<const float4*>(src + 4 * h);
            f[4 * h] = v.x;
            f[4 * h + 1] = v.y;
            f[4 * h + 2] = v.z;
            f[4 * h + 3] = v.w;
          }
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) f[e] = src[e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) f[e] = 0.0f;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) xa[u][q] = Mma<T>::pack(f[2 * q], f[2 * q + 1]);
      if (c0 != warp && c < chunks) vw[u] = load_stream16(wr + c * 32);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * W;
      if (c >= chunks) break;
      const uint32_t a_lo[4] = {xa[u][0], 0u, xa[u][1], 0u}, a_hi[4] = {xa[u][2], 0u, xa[u][3], 0u};
      Mma<T>::mma(acc, a_lo, vw[u].x, vw[u].y);
      Mma<T>::mma(acc, a_hi, vw[u].z, vw[u].w);
    }
  }
  __shared__ float partial[W][2][32];
  partial[warp][0][lane] = acc[0];
  partial[warp][1][lane] = acc[1];
  __syncthreads();
  if (warp != 0 || g >= m) return;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float v = partial[0][e][lane];
#pragma unroll
    for (int r = 1; r < W; ++r) v += partial[r][e][lane];
    const int64_t j = row0 + 2 * t + e;
    if (j < n) out[g * ldo + j] = bias != nullptr ? v + load_as_float(bias, bias_dtype, j) : v;
  }
}

struct DeviceLimits {
  int sms = 0;
  int smem_optin = 0;
  int cc = 0;  // compute capability, major * 10 + minor
};

DeviceLimits device_limits(int device) {
  return {multiprocessor_count(device), shared_memory_optin(device), compute_capability(device)};
}

template <typename T, int M, bool kNorm = false, bool kSilu = false>
void launch_m(const float* x, int64_t k, int64_t ldx, const T* w, int64_t n, int64_t ldw, const void* bias,
              DType bias_dtype, float* out, int64_t ldo, int sms, const GemvFusion& f, cudaStream_t stream) {
  // One row per warp group for m <= 2 (8 loads in flight per lane); two rows for m >= 3, so that
  // each x vector read from shared memory serves two weight vectors; the gate and up rows of a
  // column for kSilu.
  constexpr int R = M <= 2 && !kSilu ? 1 : 2;
  constexpr int U = 8 / R;
  const int64_t groups = kSilu ? n / 2 : (n + R - 1) / R;
  const int64_t max_warps = static_cast<int64_t>(sms) * kBlocksPerSm * kWarps;
  const int64_t iters = (groups + max_warps - 1) / max_warps;
  const int64_t warps = (groups + iters - 1) / iters;  // each warp gets iters groups (the last fewer)
  const int64_t blocks = (warps + kWarps - 1) / kWarps;
  const size_t smem = static_cast<size_t>(M * k) * sizeof(T);
  auto* kernel = gemv_kernel<T, M, R, U, kNorm, kSilu>;
  if (smem > 48 * 1024) {
    // Per launch, as the limit is per device and function; not a stream operation (capturable).
    RLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, x, k, ldx, w, n, ldw,
             bias, bias_dtype, out, ldo, iters, f);
}

// The fused kernels (1-2 rows of x).
template <typename T, int M>
void launch_fused(const float* x, int64_t k, int64_t ldx, const T* w, int64_t n, int64_t ldw,
                  const void* bias, DType bias_dtype, float* out, int64_t ldo, int sms, const GemvFusion& f,
                  cudaStream_t stream) {
  const bool norm = f.norm_weight != nullptr;
  if (norm && f.silu_and_mul) {
    launch_m<T, M, true, true>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, f, stream);
  } else if (norm) {
    launch_m<T, M, true, false>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, f, stream);
  } else if (f.silu_and_mul) {
    launch_m<T, M, false, true>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, f, stream);
  } else {
    launch_m<T, M>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, f, stream);
  }
}

constexpr int kMmaWarps = 4, kMmaUnroll = 4;
constexpr int64_t kMmaMinRows = 3;  // below, the CUDA-core kernel (one or two rows per warp) is faster

// The tensor-core kernel where it applies (returns false, having launched nothing, elsewhere).
template <typename T>
bool launch_mma(const float* x, int64_t m, int64_t k, int64_t ldx, const T* w, int64_t n, int64_t ldw,
                const void* bias, DType bias_dtype, float* out, int64_t ldo, int cc, cudaStream_t stream) {
  if (m < kMmaMinRows || cc < 80 || k % 32 != 0) return false;
  const dim3 grid(static_cast<unsigned>((n + 7) / 8)), block(kMmaWarps * 32);
  if (ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    launch_pdl(gemv_mma_kernel<T, kMmaWarps, kMmaUnroll, true>, grid, block, 0, stream, x,
               static_cast<int>(m), k, ldx, w, n, ldw, bias, bias_dtype, out, ldo);
  } else {
    launch_pdl(gemv_mma_kernel<T, kMmaWarps, kMmaUnroll, false>, grid, block, 0, stream, x,
               static_cast<int>(m), k, ldx, w, n, ldw, bias, bias_dtype, out, ldo);
  }
  return true;
}

template <typename T>
void launch_t(const float* x, int64_t m, int64_t k, int64_t ldx, const T* w, int64_t n, int64_t ldw,
              const void* bias, DType bias_dtype, float* out, int64_t ldo, const DeviceLimits& d,
              cudaStream_t stream) {
  if (launch_mma(x, m, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, d.cc, stream)) return;
  const int sms = d.sms;
  switch (m) {
#define RLM_GEMV_CASE(M) \
  case M: return launch_m<T, M>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, GemvFusion{}, stream);
    RLM_GEMV_CASE(1)
    RLM_GEMV_CASE(2)
    RLM_GEMV_CASE(3)
    RLM_GEMV_CASE(4)
    RLM_GEMV_CASE(5)
    RLM_GEMV_CASE(6)
    RLM_GEMV_CASE(7)
    RLM_GEMV_CASE(8)
#undef RLM_GEMV_CASE
    default: fail(str("gemv: m = ", m, " outside [1, ", kGemvMaxRows, "]"));
  }
}

}  // namespace

int64_t gemv_max_smem_bytes(int device) { return device_limits(device).smem_optin; }

bool gemv_supported(int device, int64_t m, int64_t k, const void* weight, DType weight_dtype, int64_t ldw) {
  return m >= 1 && m <= kGemvMaxRows && (weight_dtype == DType::kBF16 || weight_dtype == DType::kF16) && k > 0 &&
         k % 8 == 0 && ldw % 8 == 0 && reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
         m * k * 2 <= gemv_max_smem_bytes(device);
}

void gemv_launch(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                 DType weight_dtype, int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out,
                 int64_t ldo, cudaStream_t stream) {
  RLM_CHECK(gemv_supported(device, m, k, weight, weight_dtype, ldw) && n >= 1)
      << "gemv: unsupported arguments (m " << m << ", k " << k << ", ldw " << ldw << ", n " << n << ", weight "
      << dtype_name(weight_dtype) << ")";
  RLM_CHECK(bias == nullptr || bias_dtype == DType::kF32 || bias_dtype == DType::kBF16 || bias_dtype == DType::kF16)
      << "gemv: unsupported bias dtype " << dtype_name(bias_dtype);
  const DeviceLimits d = device_limits(device);
  if (weight_dtype == DType::kBF16) {
    launch_t(x, m, k, ldx, static_cast<const __nv_bfloat16*>(weight), n, ldw, bias, bias_dtype, out, ldo, d,
             stream);
  } else {
    launch_t(x, m, k, ldx, static_cast<const __half*>(weight), n, ldw, bias, bias_dtype, out, ldo, d, stream);
  }
}

bool gemv_fused_supported(int device, int64_t m, int64_t k, const void* weight, DType weight_dtype,
                          int64_t ldw, int64_t n, const GemvFusion& f) {
  return m <= kGemvFusedMaxRows && gemv_supported(device, m, k, weight, weight_dtype, ldw) && n >= 1 &&
         (!f.silu_and_mul || n % 2 == 0);
}

void gemv_fused_launch(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                       DType weight_dtype, int64_t n, int64_t ldw, const void* bias, DType bias_dtype,
                       float* out, int64_t ldo, const GemvFusion& f, cudaStream_t stream) {
  RLM_CHECK(gemv_fused_supported(device, m, k, weight, weight_dtype, ldw, n, f))
      << "gemv: unsupported fused arguments (m " << m << ", k " << k << ", n " << n << ", weight "
      << dtype_name(weight_dtype) << ")";
  const int sms = device_limits(device).sms;
  auto run = [&](auto* w) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(w)>>;
    if (m == 1) return launch_fused<T, 1>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, f, stream);
    launch_fused<T, 2>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, f, stream);
  };
  if (weight_dtype == DType::kBF16) {
    run(static_cast<const __nv_bfloat16*>(weight));
  } else {
    run(static_cast<const __half*>(weight));
  }
}

}  // namespace rlm::cuda
