// Skinny GEMM for decode: out[m, n] = round(x)[m, k] @ W[n, k]^T with m <= 8 and 16-bit W.
// Each warp owns R consecutive output rows (columns j of out) at a time and streams their weight
// rows with 16-byte non-allocating loads (8 values), R * U loads in flight per lane; x is rounded
// to the weight dtype once per block into shared memory ([m][k], 16-byte vectors read
// conflict-free by consecutive lanes); every lane keeps f32 partial sums for its R x m outputs,
// reduced by a fixed xor-shuffle tree (deterministic). The grid gives every warp the same number
// of row groups (balanced tail). No atomics, no allocation: capturable in a CUDA graph.
#include "kernels/cuda/gemv.cuh"

#include <array>
#include <atomic>
#include <type_traits>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_utils.cuh"
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

__device__ __forceinline__ float load_bias(const void* bias, DType dtype, int64_t j) {
  switch (dtype) {
    case DType::kBF16: return to_float(static_cast<const __nv_bfloat16*>(bias)[j]);
    case DType::kF16: return to_float(static_cast<const __half*>(bias)[j]);
    default: return static_cast<const float*>(bias)[j];
  }
}

// R rows per warp per group, U 16-byte loads per row per lane in flight; iters row groups per warp.
template <typename T, int M, int R, int U>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    gemv_kernel(const float* __restrict__ x, int64_t k, int64_t ldx, const T* __restrict__ w, int64_t n,
                int64_t ldw, const void* __restrict__ bias, DType bias_dtype, float* __restrict__ out, int64_t ldo,
                int64_t iters) {
  extern __shared__ uint4 xs[];  // [M][kv]: x rounded to T, 8 values per vector
  const int64_t kv = k / 8;
  const int lane = threadIdx.x % 32;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.x / 32;
  const int64_t total_warps = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t groups = (n + R - 1) / R;

  // Weights are constant, so they are read before the wait for the kernel that writes x (PDL):
  // for m <= 2, the first group's first 32 * U vectors per row into registers (when the rows have
  // that many) and the next 32 * U into L2; for larger m (more accumulators; registers would
  // spill) the first 32 * U into L2.
  const bool preloaded = M <= 2 && warp < groups && kv >= 32 * U;
  uint4 first[M <= 2 ? U : 1][R];
  if (warp < groups) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = warp * R + r < n ? warp * R + r : n - 1;
      const uint4* wr = reinterpret_cast<const uint4*>(w + row * ldw);
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
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t idx = threadIdx.x; idx < M * kv; idx += kThreads) {
    const int64_t i = idx / kv, c = (idx % kv) * 8;
    const float* src = x + i * ldx + c;
    T t[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) t[e] = from_float<T>(src[e]);
    uint4 packed;
    memcpy(&packed, t, sizeof(packed));
    xs[idx] = packed;
  }
  __syncthreads();

  for (int64_t it = 0; it < iters; ++it) {
    const int64_t g = warp + it * total_warps;
    if (g >= groups) break;  // warp-uniform; no barrier follows
    const int64_t row0 = g * R;
    const uint4* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = row0 + r < n ? row0 + r : n - 1;  // a row past n re-reads the last one
      wr[r] = reinterpret_cast<const uint4*>(w + row * ldw);
    }
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < M; ++i) acc[r][i] = 0.0f;
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
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float s = acc[r][i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const int64_t j = row0 + r;
        if (lane == (r * M + i) % 32 && j < n) {
          out[i * ldo + j] = bias != nullptr ? s + load_bias(bias, bias_dtype, j) : s;
        }
      }
    }
  }
}

struct DeviceLimits {
  int sms = 0;
  int smem_optin = 0;
};

DeviceLimits device_limits(int device) {
  static std::array<std::atomic<int>, 64> sms{}, smem{};
  RLM_CHECK(device >= 0 && device < 64) << "gemv: device index " << device << " out of range";
  DeviceLimits d{sms[device].load(std::memory_order_relaxed), smem[device].load(std::memory_order_relaxed)};
  if (d.sms == 0 || d.smem_optin == 0) {
    RLM_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
    RLM_CUDA_CHECK(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    sms[device].store(d.sms, std::memory_order_relaxed);
    smem[device].store(d.smem_optin, std::memory_order_relaxed);
  }
  return d;
}

template <typename T, int M>
void launch_m(const float* x, int64_t k, int64_t ldx, const T* w, int64_t n, int64_t ldw, const void* bias,
              DType bias_dtype, float* out, int64_t ldo, int sms, cudaStream_t stream) {
  // One row per warp group for m <= 2 (8 loads in flight per lane); two rows for m >= 3, so that
  // each x vector read from shared memory serves two weight vectors.
  constexpr int R = M <= 2 ? 1 : 2;
  constexpr int U = 8 / R;
  const int64_t groups = (n + R - 1) / R;
  const int64_t max_warps = static_cast<int64_t>(sms) * kBlocksPerSm * kWarps;
  const int64_t iters = (groups + max_warps - 1) / max_warps;
  const int64_t warps = (groups + iters - 1) / iters;  // each warp gets iters groups (the last fewer)
  const int64_t blocks = (warps + kWarps - 1) / kWarps;
  const size_t smem = static_cast<size_t>(M * k) * sizeof(T);
  if (smem > 48 * 1024) {
    // Per launch, as the limit is per device and function; not a stream operation (capturable).
    RLM_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<T, M, R, U>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  }
  launch_pdl(gemv_kernel<T, M, R, U>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, x, k,
             ldx, w, n, ldw, bias, bias_dtype, out, ldo, iters);
}

template <typename T>
void launch_t(const float* x, int64_t m, int64_t k, int64_t ldx, const T* w, int64_t n, int64_t ldw,
              const void* bias, DType bias_dtype, float* out, int64_t ldo, int sms, cudaStream_t stream) {
  switch (m) {
#define RLM_GEMV_CASE(M) \
  case M: return launch_m<T, M>(x, k, ldx, w, n, ldw, bias, bias_dtype, out, ldo, sms, stream);
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
  const int sms = device_limits(device).sms;
  if (weight_dtype == DType::kBF16) {
    launch_t(x, m, k, ldx, static_cast<const __nv_bfloat16*>(weight), n, ldw, bias, bias_dtype, out, ldo, sms,
             stream);
  } else {
    launch_t(x, m, k, ldx, static_cast<const __half*>(weight), n, ldw, bias, bias_dtype, out, ldo, sms, stream);
  }
}

}  // namespace rlm::cuda
