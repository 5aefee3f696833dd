// CUDA FP8 (E4M3) linear layer: activation quantization, the small-m GEMV, cuBLASLt FP8 GEMM (scales
// in its epilogue or in ours), and a tiled FMA kernel for what cuBLASLt does not take (block scales, sm_80,
// unaligned shapes). Arithmetic as in kernels/cpu/fp8_linear.h.
#include <cublasLt.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <map>
#include <mutex>

#include "core/cuda_check.h"
#include "core/env.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/silu.cuh"

namespace rlm::cuda {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
  __nv_fp8_e4m3 v;
  v.__x = b;
  return static_cast<float>(v);
}

__device__ __forceinline__ uint8_t float_to_e4m3(float f) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}

// One block per (row, group): s = static scale or max|x| / 448 (1 for all zeros); q = e4m3(x / s).
__global__ void quantize_rows_kernel(const float* x, int64_t k, int64_t ldx, int64_t group, int64_t groups,
                                     const float* static_scale, uint8_t* q, float* scales) {
  // Dependents may be scheduled at once (their own wait covers this whole grid): the GEMV's blocks
  // then read their weights while this small kernel waits for x and runs.
  pdl_launch_dependents();
  pdl_wait();
  const int64_t i = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t c0 = g * group, c1 = min(k, c0 + group);
  const float* xr = x + i * ldx;
  __shared__ float s_amax[kBlock / kWarp];
  __shared__ float s_scale;
  float s;
  if (static_scale != nullptr) {
    s = *static_scale;
  } else {
    float amax = 0.0f;
    for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) amax = fmaxf(amax, fabsf(xr[c]));
    for (int off = kWarp / 2; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (threadIdx.x % kWarp == 0) s_amax[threadIdx.x / kWarp] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
      float m = 0.0f;
      for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) m = fmaxf(m, s_amax[w]);
      s_scale = m > 0.0f ? m / kF8E4M3Max : 1.0f;
    }
    __syncthreads();
    s = s_scale;
  }
  if (threadIdx.x == 0) scales[i * groups + g] = s;
  for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) q[i * k + c] = float_to_e4m3(xr[c] / s);
}

// The same for one group per row (per-token scales) with 16-byte aligned rows of k % 4 == 0 and
// k <= kQuantVecThreads * 4 * kQuantVecPer: one block per row; every load of a thread is issued
// before the reduction, the row stays in registers, four codes are stored per 4-byte word.
// kSiluMul: x rows are [gate | up] (2k wide) and the quantized row is silu(gate) * up, computed as
// silu_and_mul computes it (silu_f32, then the product): the codes and scales of silu_and_mul
// followed by this kernel, without the f32 row in memory.
constexpr int kQuantVecThreads = 512, kQuantVecPer = 8;
template <bool kSiluMul = false>
__global__ void __launch_bounds__(kQuantVecThreads)
    quantize_rows_vec_kernel(const float* x, int64_t k, int64_t ldx, const float* static_scale, uint8_t* q,
                             float* scales) {
  pdl_launch_dependents();  // as in quantize_rows_kernel
  pdl_wait();
  const int64_t i = blockIdx.x, kv = k / 4;
  const float4* xr = reinterpret_cast<const float4*>(x + i * ldx);
  float4 v[kQuantVecPer];
  float amax = 0.0f;
  if constexpr (kSiluMul) {
    float4 up[kQuantVecPer];
#pragma unroll
    for (int u = 0; u < kQuantVecPer; ++u) {  // every load first
      const int64_t c = threadIdx.x + static_cast<int64_t>(u) * kQuantVecThreads;
      v[u] = c < kv ? xr[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      up[u] = c < kv ? xr[kv + c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kQuantVecPer; ++u) {  // silu(0) * 0 = 0 past the row
      v[u] = make_float4(silu_f32(v[u].x) * up[u].x, silu_f32(v[u].y) * up[u].y, silu_f32(v[u].z) * up[u].z,
                         silu_f32(v[u].w) * up[u].w);
    }
  } else {
#pragma unroll
    for (int u = 0; u < kQuantVecPer; ++u) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(u) * kQuantVecThreads;
      v[u] = c < kv ? xr[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  __shared__ float s_amax[kQuantVecThreads / kWarp];
  float s;
  if (static_scale != nullptr) {
    s = *static_scale;
  } else {
#pragma unroll
    for (int u = 0; u < kQuantVecPer; ++u) {
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[u].x), fabsf(v[u].y)), fmaxf(fabsf(v[u].z), fabsf(v[u].w))));
    }
    for (int off = kWarp / 2; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (threadIdx.x % kWarp == 0) s_amax[threadIdx.x / kWarp] = amax;
    __syncthreads();
    float m = 0.0f;
#pragma unroll
    for (int w = 0; w < kQuantVecThreads / kWarp; ++w) m = fmaxf(m, s_amax[w]);
    s = m > 0.0f ? m / kF8E4M3Max : 1.0f;
  }
  if (threadIdx.x == 0) scales[i] = s;
  uint32_t* qr = reinterpret_cast<uint32_t*>(q + i * k);
#pragma unroll
  for (int u = 0; u < kQuantVecPer; ++u) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(u) * kQuantVecThreads;
    if (c < kv) {
      qr[c] = static_cast<uint32_t>(float_to_e4m3(v[u].x / s)) |
              static_cast<uint32_t>(float_to_e4m3(v[u].y / s)) << 8 |
              static_cast<uint32_t>(float_to_e4m3(v[u].z / s)) << 16 |
              static_cast<uint32_t>(float_to_e4m3(v[u].w / s)) << 24;
    }
  }
}

// The scale of the product term for activation row i, weight row j and column c.
struct ScaleView {
  const float* sx;  // [m, groups]
  const float* sw;  // [n] or [ceil(n / block_n), groups]
  int64_t groups, group, block_n;
  __device__ __forceinline__ float operator()(int64_t i, int64_t j, int64_t c) const {
    if (block_n == 0) return sx[i] * sw[j];
    const int64_t g = c / group;
    return sx[i * groups + g] * sw[(j / block_n) * groups + g];
  }
};

__device__ __forceinline__ float load_bias(const void* bias, DType dtype, int64_t j) {
  return bias == nullptr ? 0.0f : load_as_float(bias, dtype, j);
}

// GEMV for m <= kFp8GemvMaxRows: one warp per weight row; each lane reads 16 e4m3 weights (16 bytes)
// per step and the matching 16 quantized activations of every row. Requires k % 16 == 0, ldw % 16 ==
// 0, 16-byte aligned weight, and (block scales) block_k % 16 == 0, so a lane's 16 columns share a
// scale group. Per-channel: the sum over k is scaled once; blocks: each 16-column piece is scaled.
template <int M>
__global__ void fp8_gemv_kernel(const uint8_t* q, int64_t k, const uint8_t* w, int64_t n, int64_t ldw, ScaleView sv,
                                const void* bias, DType bias_dtype, float* out, int64_t ldo) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (j >= n) return;
  const int lane = threadIdx.x % kWarp;
  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  const uint8_t* wr = w + j * ldw;
  for (int64_t c = static_cast<int64_t>(lane) * 16; c < k; c += kWarp * 16) {
    const uint4 wv = *reinterpret_cast<const uint4*>(wr + c);
    const uint8_t* wb = reinterpret_cast<const uint8_t*>(&wv);
    float wf[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) wf[e] = e4m3_to_float(wb[e]);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const uint4 xv = *reinterpret_cast<const uint4*>(q + i * k + c);
      const uint8_t* xb = reinterpret_cast<const uint8_t*>(&xv);
      float part = 0.0f;
#pragma unroll
      for (int e = 0; e < 16; ++e) part = fmaf(e4m3_to_float(xb[e]), wf[e], part);
      acc[i] += sv.block_n == 0 ? part : part * sv(i, j, c);
    }
  }
#pragma unroll
  for (int i = 0; i < M; ++i) {
    float v = acc[i];
    for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) out[i * ldo + j] = (sv.block_n == 0 ? v * sv(i, j, 0) : v) + load_bias(bias, bias_dtype, j);
  }
}

// d = A (16 x 32 e4m3, row) x B (32 x 8 e4m3, col), f32 result (C = 0). sm_89+.
__device__ __forceinline__ void mma_e4m3(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1, float (&d)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
#else
  __trap();  // launched only on sm_89+ (mma_gemv_ok)
#endif
}

// Tensor-core GEMV for m <= kFp8GemvMaxRows on sm_89+ (k % 64 == 0): one block of W warps per 8
// weight rows; the weight rows are the MMA's n = 8 columns (B) and the activation rows its first 8
// of 16 rows (A; rows 8-15 are zero). The 64-column chunks of k go to the warps in turn (chunk c
// to warp c % W, so the block reads each row's bytes in order), U chunks per round. Lane (g, t) =
// (lane / 4, lane % 4) loads 16 bytes at columns 64c + 16t of weight row g and of activation row
// g (zero for g >= m); as the sum over k may visit the columns in any order, those bytes are the
// lane's B and A fragments of two m16n8k32 e4m3 MMAs (words 0-1 and 2-3), whose results (C = 0)
// are added in f32 per chunk — the tensor cores' short accumulator never holds more than 32
// products. Per-channel scales multiply the sum once; block scales (block_k % 64 == 0) each
// chunk's partial. The warps' sums meet in shared memory in a fixed order. Each warp's first round
// of weights is read before the PDL wait.
// Measured on an H100 (docs/perf/decode_kernels.md, fourth section): 4 warps x 4 chunks (70
// registers, 7 blocks per SM) beat 8 x 8, 8 x 4 and 4 x 8 as the one shape for every linear,
// 16-row tiles (weights as A), double-buffered rounds, L2 prefetch before the wait, and staging
// 512-byte row segments through shared memory with cp.async. Grids that fit in one wave of the
// 8-chunk kernel (102 registers, 4 blocks per SM) take it (mma_gemv_unroll; twentieth section).
constexpr int kMmaWarps = 4;
template <int W, int U>
__global__ void __launch_bounds__(W* kWarp)
    fp8_mma_gemv_kernel(const uint8_t* __restrict__ q, int m, int64_t k, const uint8_t* __restrict__ w,
                        int64_t n, int64_t ldw, ScaleView sv, const void* bias, DType bias_dtype,
                        float* __restrict__ out, int64_t ldo) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 8;
  const uint8_t* wr = w + min(row0 + g, n - 1) * ldw + t * 16;  // rows past n re-read the last
  const bool has_x = g < m;
  const uint8_t* xr = q + (has_x ? g : 0) * k + t * 16;
  const int64_t chunks = k / 64;
  float acc[2] = {0.0f, 0.0f};
  uint4 vw[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = warp + static_cast<int64_t>(u) * W;
    if (c < chunks) vw[u] = load_stream16(wr + c * 64);
  }
  pdl_wait();
  pdl_launch_dependents();
  for (int64_t c0 = warp; c0 < chunks; c0 += static_cast<int64_t>(U) * W) {
    uint4 vx[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * W;
      vx[u] = has_x && c < chunks ? *reinterpret_cast<const uint4*>(xr + c * 64) : make_uint4(0, 0, 0, 0);
      if (c0 != warp && c < chunks) vw[u] = load_stream16(wr + c * 64);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * W;
      if (c >= chunks) break;
      float d0[4], d1[4];
      mma_e4m3(vx[u].x, 0u, vx[u].y, 0u, vw[u].x, vw[u].y, d0);
      mma_e4m3(vx[u].z, 0u, vx[u].w, 0u, vw[u].z, vw[u].w, d1);
      if (sv.block_n == 0) {
        acc[0] += d0[0] + d1[0];
        acc[1] += d0[1] + d1[1];
      } else {
        const int i = min(g, m - 1);
#pragma unroll
        for (int e = 0; e < 2; ++e) acc[e] += (d0[e] + d1[e]) * sv(i, min(row0 + 2 * t + e, n - 1), c * 64);
      }
    }
  }
  __shared__ float partial[W][2][kWarp];
  partial[warp][0][lane] = acc[0];
  partial[warp][1][lane] = acc[1];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float v = partial[0][e][lane];
#pragma unroll
    for (int r = 1; r < W; ++r) v += partial[r][e][lane];
    const int i = g;
    const int64_t j = row0 + 2 * t + e;
    if (i < m && j < n)
      out[i * ldo + j] = (sv.block_n == 0 ? v * sv(i, j, 0) : v) + load_bias(bias, bias_dtype, j);
  }
}

template <int W, int U>
void launch_mma_gemv(const uint8_t* q, int64_t m, const Fp8Weight& w, const ScaleView& sv, const void* bias,
                     DType bias_dtype, float* out, int64_t ldo, cudaStream_t stream) {
  launch_pdl(fp8_mma_gemv_kernel<W, U>, dim3(static_cast<unsigned>((w.n + 7) / 8)), dim3(W * kWarp), 0,
             stream, q, static_cast<int>(m), w.k, static_cast<const uint8_t*>(w.data), w.n, w.ldw, sv, bias,
             bias_dtype, out, ldo);
}

// Tiled FMA GEMM (any shape and alignment): a 16 x 16 output tile per block, 16-column k tiles in
// shared memory; each 16-column k tile's partial sum is scaled by its scale (per channel: one
// scale for all k).
constexpr int kTile = 16;
__global__ void fp8_fma_kernel(const uint8_t* q, int64_t m, int64_t k, const uint8_t* w, int64_t n, int64_t ldw,
                               ScaleView sv, const void* bias, DType bias_dtype, float* out, int64_t ldo) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
  const int64_t wj = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.y;  // weight row this thread loads
  float acc = 0.0f, group_acc = 0.0f;
  int64_t group_begin = 0;
  for (int64_t c0 = 0; c0 < k; c0 += kTile) {
    const int64_t c = c0 + threadIdx.x;
    xs[threadIdx.y][threadIdx.x] = (i < m && c < k) ? e4m3_to_float(q[i * k + c]) : 0.0f;
    ws[threadIdx.y][threadIdx.x] = (wj < n && c < k) ? e4m3_to_float(w[wj * ldw + c]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kTile; ++e) {
      const int64_t ce = c0 + e;
      if (sv.block_n != 0 && ce < k && ce / sv.group != group_begin / sv.group) {
        if (i < m && j < n) acc += group_acc * sv(i, j, group_begin);
        group_acc = 0.0f;
        group_begin = ce;
      }
      group_acc = fmaf(xs[threadIdx.y][e], ws[threadIdx.x][e], group_acc);
    }
    __syncthreads();
  }
  if (i < m && j < n) {
    acc = sv.block_n == 0 ? group_acc * sv(i, j, 0) : acc + group_acc * sv(i, j, group_begin);
    out[i * ldo + j] = acc + load_bias(bias, bias_dtype, j);
  }
}

// out[i, j] = out[i, j] * sx[i] * sw[j] + bias[j] (after the unscaled cuBLASLt product; sx null: scale 1).
__global__ void scale_epilogue_kernel(float* out, int64_t m, int64_t n, int64_t ldo, const float* sx, const float* sw,
                                      const void* bias, DType bias_dtype) {
  const int64_t total = m * n;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    const float s = sx != nullptr ? sx[i] * sw[j] : 1.0f;  // null: only the bias (k == 0)
    out[i * ldo + j] = out[i * ldo + j] * s + load_bias(bias, bias_dtype, j);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool gemv_ok(int64_t m, const Fp8Weight& w) {
  return m >= 1 && m <= kFp8GemvMaxRows && w.k % 16 == 0 && w.ldw % 16 == 0 && aligned16(w.data) &&
         (w.block_n == 0 || w.block_k % 16 == 0);
}

// The tensor-core GEMV takes m <= kFp8GemvMaxRows on sm_89+ with 64-column chunks (block scales:
// whole chunks per scale group) and 16-byte aligned weight rows.
bool mma_gemv_ok(int device, int64_t m, const Fp8Weight& w) {
  return m >= 1 && m <= kFp8GemvMaxRows && w.k % 64 == 0 && w.ldw % 16 == 0 && aligned16(w.data) &&
         (w.block_n == 0 || w.block_k % 64 == 0) && compute_capability(device) >= 89;
}

// Chunks per round (U) of the tensor-core GEMV for a grid of `blocks` 8-row blocks: 8 when the
// 8-chunk kernel's grid is resident all at once (one wave: at most its blocks a multiprocessor,
// from the occupancy query, times the multiprocessors), else 4. Such a grid has at most 4 blocks a
// multiprocessor on sm_90, too few warps for 4 chunks each to keep the memory system busy; where
// more blocks follow one another, the 4-chunk kernel's 7 blocks a multiprocessor do (docs/perf/
// decode_kernels.md, twentieth section). Depends on the grid only, so a CUDA graph's choice holds.
// RADIXLM_FP8_GEMV_UNROLL=4 or 8 fixes it (each is the other's reference).
int mma_gemv_unroll(int device, int64_t blocks) {
  static const int64_t forced = env_int64("RADIXLM_FP8_GEMV_UNROLL", 0);
  if (forced != 0) {
    RLM_CHECK(forced == 4 || forced == 8) << "RADIXLM_FP8_GEMV_UNROLL must be 4 or 8, not " << forced;
    return static_cast<int>(forced);
  }
  const int per_sm = resident_blocks_per_sm(
      device, reinterpret_cast<const void*>(fp8_mma_gemv_kernel<kMmaWarps, 8>), kMmaWarps * kWarp, 0);
  return blocks <= static_cast<int64_t>(per_sm) * multiprocessor_count(device) ? 8 : 4;
}

// cuBLASLt takes per-channel FP8 products on sm_89+ with 16-multiple sizes and aligned pointers.
bool cublaslt_ok(int device, int64_t m, const Fp8Weight& w, int64_t ldo) {
  return w.block_n == 0 && compute_capability(device) >= 89 && w.k % 16 == 0 && w.ldw % 16 == 0 &&
         w.n % 16 == 0 && ldo % 4 == 0 && aligned16(w.data) && m > kFp8GemvMaxRows;
}

cublasLtHandle_t lt_handle(int device) {
  static std::array<cublasLtHandle_t, 64> handles{};
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  RLM_CHECK(device >= 0 && device < static_cast<int>(handles.size())) << "device " << device;
  if (handles[device] == nullptr) RLM_CUBLAS_CHECK(cublasLtCreate(&handles[device]));
  return handles[device];
}

// cuBLASLt's descriptors for out (f32 [m, n], ldo) = q [m, k] (e4m3, contiguous) @ w^T: column-major
// out^T [n, m] = W^T (op T of the k x n column-major weight) x Q (k x m) -- the "TN" layout FP8
// needs. With scales (sw [n], sx [m]): outer-vector scaling, product (j, i) times sw[j] * sx[i] in
// cuBLASLt's epilogue (cuBLAS 12.9+ on Hopper); without: the unscaled product.
struct LtAlgo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

class LtMatmul {
 public:
  LtMatmul(int64_t m, const Fp8Weight& w, int64_t ldo, const float* sw, const float* sx) {
    RLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    RLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    RLM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (sw != nullptr) {  // a cuBLASLt without these attributes (before 12.9) has no algorithm for it
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      scales_ok_ =
          cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)) ==
              CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)) ==
              CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof(sw)) ==
              CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof(sx)) ==
              CUBLAS_STATUS_SUCCESS;
    }
    RLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_8F_E4M3, w.k, w.n, w.ldw));
    RLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_8F_E4M3, w.k, m, w.k));
    RLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, CUDA_R_32F, w.n, m, ldo));
  }
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;
  ~LtMatmul() {
    cublasLtMatrixLayoutDestroy(d_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(op_);
  }

  // The heuristic's first algorithm without workspace (found false when cuBLASLt has none).
  LtAlgo algo(cublasLtHandle_t lt) const {
    if (!scales_ok_) return {};
    cublasLtMatmulPreference_t pref = nullptr;
    RLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t workspace = 0;
    RLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &workspace, sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, op_, a_, b_, d_, d_, pref, 1, &heur, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) return {};
    RLM_CUBLAS_CHECK(st);
    return {true, heur.algo};
  }

  cublasStatus_t run(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, const void* w, const uint8_t* q,
                     float* out, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasLtMatmul(lt, op_, &alpha, w, a_, q, b_, &beta, out, d_, out, d_, &algo, nullptr, 0, stream);
  }

 private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  bool scales_ok_ = true;
};

// The algorithm per (device, shape, scaled): the heuristic query costs host time that eager steps
// (prefill, mixed) would pay four times per layer; a shape cuBLASLt turned down stays turned down.
using LtKey = std::array<int64_t, 7>;
struct LtPlans {
  std::mutex mu;
  std::map<LtKey, LtAlgo> algos;
};
LtPlans& lt_plans() {
  static LtPlans plans;
  return plans;
}

LtKey lt_key(int device, int64_t m, const Fp8Weight& w, int64_t ldo, bool scaled) {
  return {device, m, w.n, w.k, w.ldw, ldo, scaled ? 1 : 0};
}

LtAlgo lt_algo(int device, const LtKey& key, const LtMatmul& mm) {
  LtPlans& plans = lt_plans();
  std::lock_guard<std::mutex> g(plans.mu);
  auto it = plans.algos.find(key);
  if (it != plans.algos.end()) return it->second;
  // Prefill chunks come in every size: a bound keeps the table small (a full table starts over).
  if (plans.algos.size() >= 16384) plans.algos.clear();
  return plans.algos.emplace(key, mm.algo(lt_handle(device))).first->second;
}

void lt_turn_down(const LtKey& key) {
  LtPlans& plans = lt_plans();
  std::lock_guard<std::mutex> g(plans.mu);
  plans.algos[key] = LtAlgo{};
}

// out = q @ w^T on cuBLASLt, scaled by sw[j] * sx[i] when sx is given (else unscaled). Returns false
// (nothing launched) when cuBLASLt offers no algorithm for the shape and scaling.
bool cublaslt_fp8_gemm(int device, const uint8_t* q, int64_t m, const Fp8Weight& w, const float* sx,
                       float* out, int64_t ldo, cudaStream_t stream) {
  const bool scaled = sx != nullptr;
  const LtMatmul mm(m, w, ldo, scaled ? w.scale : nullptr, sx);
  const LtKey key = lt_key(device, m, w, ldo, scaled);
  const LtAlgo algo = lt_algo(device, key, mm);
  if (!algo.found) return false;
  const cublasStatus_t st = mm.run(lt_handle(device), algo.algo, w.data, q, out, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    lt_turn_down(key);
    return false;
  }
  RLM_CUBLAS_CHECK(st);
  return true;
}

// RADIXLM_FP8_LT_SCALES=0 in the environment keeps the scales out of cuBLASLt (the unscaled product
// and the epilogue pass), the reference for the outer-vector path's speed.
bool lt_scales_enabled() {
  static const bool on = env_switch_on("RADIXLM_FP8_LT_SCALES");
  return on;
}

// Rows from which cuBLASLt takes the scales itself. Below, its outer-vector algorithms (128 x 128
// tiles on Hopper) lose more than the epilogue pass costs: on the 8B shape's decode step at batch
// 32 (one H100, docs/perf/decode_kernels.md) the scaled GEMMs took 4.1 ms of 6.2, the unscaled
// path stepped in 5.5 ms; at batch 256 the scaled path won (13.2 ms against 14.2).
constexpr int64_t kLtScaledMinRows = 128;
constexpr int64_t kLtScaledTile = 128;

// The outer-vector algorithm is the only one cuBLASLt offers (one 128 x 128 output tile a CTA, no
// split-k): a product with fewer tiles than half the multiprocessors leaves most of them idle (the
// 8B shape's o_proj and down_proj: 32 tiles at 128 rows, 64 at 256, on 132), so it takes the
// unscaled algorithms (which split the work more finely) and the epilogue pass instead. Measured
// on one H100 (FP8 weights + FP8 KV, docs/perf/decode_kernels.md, thirteenth section): batch 128
// 7.80-7.84 -> 7.54-7.56 ms, 192 10.40 -> 10.09, 256 10.94 -> 10.88 (inside the rounds' spread);
// a bound at all the multiprocessors (QKV at 256 rows, 96 tiles, unscaled too) lost at 256 (11.09).
// RADIXLM_FP8_LT_SCALED_BY_TILES=0: every product from kLtScaledMinRows rows takes the scaled path
// (the reference).
bool lt_scaled_fills_device(int device, int64_t m, int64_t n) {
  static const bool on = env_switch_on("RADIXLM_FP8_LT_SCALED_BY_TILES");
  if (!on) return true;
  const int64_t tiles = ((m + kLtScaledTile - 1) / kLtScaledTile) * ((n + kLtScaledTile - 1) / kLtScaledTile);
  return 2 * tiles >= multiprocessor_count(device);
}

// Whether the product is one for cuBLASLt's own scaling (per-token x per-channel scales, no bias,
// enough rows and tiles), before asking cuBLASLt for an algorithm.
bool lt_scaled_wanted(int device, int64_t m, const Fp8Weight& w, bool bias) {
  return !bias && w.scale != nullptr && m >= kLtScaledMinRows && lt_scales_enabled() &&
         lt_scaled_fills_device(device, m, w.n);
}

// Whether cuBLASLt scales the product itself for this shape (no epilogue pass). The scale pointers
// only need to be plausible for the query.
bool cublaslt_scales(int device, int64_t m, const Fp8Weight& w, int64_t ldo, bool bias) {
  if (!lt_scaled_wanted(device, m, w, bias)) return false;
  const LtMatmul mm(m, w, ldo, w.scale, w.scale);
  return lt_algo(device, lt_key(device, m, w, ldo, true), mm).found;
}

void launch_quantize(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t group, const float* static_scale,
                     uint8_t* q, float* scales, cudaStream_t stream) {
  const int64_t groups = (k + group - 1) / group;
  if (m == 0 || k == 0) return;
  if (group == k && k % 4 == 0 && ldx % 4 == 0 && aligned16(x) && k <= kQuantVecThreads * 4 * kQuantVecPer) {
    return launch_pdl(quantize_rows_vec_kernel<>, dim3(static_cast<unsigned>(m)), dim3(kQuantVecThreads), 0,
                      stream, x, k, ldx, static_scale, q, scales);
  }
  launch_pdl(quantize_rows_kernel, dim3(static_cast<unsigned>(m * groups)), dim3(kBlock), 0, stream, x, k,
             ldx, group, groups, static_scale, q, scales);
}

template <int M>
void launch_gemv(const uint8_t* q, const Fp8Weight& w, const ScaleView& sv, const void* bias, DType bias_dtype,
                 float* out, int64_t ldo, cudaStream_t stream) {
  constexpr int kRowsPerBlock = 8;
  const auto blocks = static_cast<unsigned>((w.n + kRowsPerBlock - 1) / kRowsPerBlock);
  fp8_gemv_kernel<M><<<blocks, kRowsPerBlock * kWarp, 0, stream>>>(
      q, w.k, static_cast<const uint8_t*>(w.data), w.n, w.ldw, sv, bias, bias_dtype, out, ldo);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize_fp8_rows(int device, const float* x, int64_t m, int64_t k, int64_t ldx, int64_t group,
                       const float* static_scale, uint8_t* q, float* scales) {
  RLM_CHECK(group > 0) << "quantize_fp8_rows: group " << group;
  set_device(device);
  launch_quantize(x, m, k, ldx, group, static_scale, q, scales,
                  static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

const char* fp8_linear_path(int device, int64_t m, const Fp8Weight& w, bool bias) {
  if (mma_gemv_ok(device, m, w))
    return mma_gemv_unroll(device, (w.n + 7) / 8) == 8 ? "gemv_mma_u8" : "gemv_mma";
  if (gemv_ok(m, w)) return "gemv";
  if (cublaslt_ok(device, m, w, w.n))
    return cublaslt_scales(device, m, w, w.n, bias) ? "cublaslt_scaled" : "cublaslt";
  return "fma";
}

namespace {

// The product of quantized activations (q [m, w.k] codes, sx [m, groups] scales in the weight's
// groups) with the weight: the GEMV, cuBLASLt or FMA path (fp8_linear.h).
void multiply_codes(int device, const uint8_t* q, const float* sx, int64_t m, int64_t groups, int64_t group,
                    const Fp8Weight& w, const void* bias, DType bias_dtype, float* out, int64_t ldo,
                    cudaStream_t stream) {
  const ScaleView sv{sx, w.scale, groups, group, w.block_n};
  const auto* wd = static_cast<const uint8_t*>(w.data);
  if (mma_gemv_ok(device, m, w)) {
    if (mma_gemv_unroll(device, (w.n + 7) / 8) == 8) {
      return launch_mma_gemv<kMmaWarps, 8>(q, m, w, sv, bias, bias_dtype, out, ldo, stream);
    }
    return launch_mma_gemv<kMmaWarps, 4>(q, m, w, sv, bias, bias_dtype, out, ldo, stream);
  }
  if (gemv_ok(m, w)) {
    switch (m) {
      case 1: return launch_gemv<1>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      case 2: return launch_gemv<2>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      case 3: return launch_gemv<3>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      case 4: return launch_gemv<4>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      case 5: return launch_gemv<5>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      case 6: return launch_gemv<6>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      case 7: return launch_gemv<7>(q, w, sv, bias, bias_dtype, out, ldo, stream);
      default: return launch_gemv<8>(q, w, sv, bias, bias_dtype, out, ldo, stream);
    }
  }
  if (cublaslt_ok(device, m, w, ldo)) {
    // Scales in cuBLASLt's epilogue where it takes them; else the unscaled product and a pass of ours.
    if (lt_scaled_wanted(device, m, w, bias != nullptr) &&
        cublaslt_fp8_gemm(device, q, m, w, sx, out, ldo, stream)) {
      return;
    }
    if (cublaslt_fp8_gemm(device, q, m, w, nullptr, out, ldo, stream)) {
      scale_epilogue_kernel<<<grid_for(m * w.n), kBlock, 0, stream>>>(out, m, w.n, ldo, sx, w.scale, bias,
                                                                      bias_dtype);
      RLM_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>((w.n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile));
  fp8_fma_kernel<<<grid, dim3(kTile, kTile), 0, stream>>>(q, m, w.k, wd, w.n, w.ldw, sv, bias, bias_dtype,
                                                          out, ldo);
  RLM_CUDA_CHECK_LAUNCH();
}

// Scratch of the context for q [m, k] (rounded up to 16 bytes) then the scales [m, groups].
struct CodesScratch {
  uint8_t* q;
  float* sx;
};
CodesScratch codes_scratch(CudaContext& ctx, int64_t m, int64_t k, int64_t groups) {
  const size_t q_bytes = (static_cast<size_t>(m * k) + 15) / 16 * 16;
  auto* base = static_cast<uint8_t*>(ctx.scratch(q_bytes + static_cast<size_t>(m * groups) * sizeof(float)));
  return {base, reinterpret_cast<float*>(base + q_bytes)};
}

void check_fp8_weight(const Fp8Weight& w) {
  RLM_CHECK(w.block_n >= 0 && w.block_k >= 0 && (w.block_n == 0) == (w.block_k == 0))
      << "cuda::fp8_linear: block " << w.block_n << " x " << w.block_k;
  RLM_CHECK(w.block_n == 0 || w.input_scale == nullptr)
      << "cuda::fp8_linear: block scales take dynamic activations";
}

}  // namespace

void fp8_linear(int device, const float* x, int64_t m, int64_t ldx, const Fp8Weight& w, const void* bias,
                DType bias_dtype, float* out, int64_t ldo) {
  check_fp8_weight(w);
  if (m == 0 || w.n == 0) return;
  CudaContext& ctx = CudaContext::get(device);
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  const int64_t k = w.k;
  if (k == 0) {
    RLM_CUDA_CHECK(cudaMemset2DAsync(out, static_cast<size_t>(ldo) * 4, 0, static_cast<size_t>(w.n) * 4,
                                     static_cast<size_t>(m), stream));
    if (bias != nullptr) {
      scale_epilogue_kernel<<<grid_for(m * w.n), kBlock, 0, stream>>>(out, m, w.n, ldo, nullptr, nullptr,
                                                                      bias, bias_dtype);
      RLM_CUDA_CHECK_LAUNCH();
    }
    return;
  }
  const int64_t group = w.block_n == 0 ? k : w.block_k;
  const int64_t groups = (k + group - 1) / group;
  auto lock = ctx.lock();
  const CodesScratch sc = codes_scratch(ctx, m, k, groups);
  launch_quantize(x, m, k, ldx, group, w.input_scale, sc.q, sc.sx, stream);
  multiply_codes(device, sc.q, sc.sx, m, groups, group, w, bias, bias_dtype, out, ldo, stream);
}

bool fp8_linear_silu_and_mul_applies(int64_t m, int64_t ldx, const Fp8Weight& w, const float* gate_up) {
  static const bool on = env_switch_on("RADIXLM_FP8_FUSED_SILU");
  return on && m > kFp8GemvMaxRows && w.block_n == 0 && w.k > 0 && w.n > 0 && w.k % 4 == 0 && ldx % 4 == 0 &&
         aligned16(gate_up) && w.k <= kQuantVecThreads * 4 * kQuantVecPer;
}

bool fp8_linear_silu_and_mul(int device, const float* gate_up, int64_t m, int64_t ldx, const Fp8Weight& w,
                             const void* bias, DType bias_dtype, float* out, int64_t ldo) {
  check_fp8_weight(w);
  if (!fp8_linear_silu_and_mul_applies(m, ldx, w, gate_up)) return false;
  CudaContext& ctx = CudaContext::get(device);
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  auto lock = ctx.lock();
  const CodesScratch sc = codes_scratch(ctx, m, w.k, 1);
  launch_pdl(quantize_rows_vec_kernel<true>, dim3(static_cast<unsigned>(m)), dim3(kQuantVecThreads), 0,
             stream, gate_up, w.k, ldx, w.input_scale, sc.q, sc.sx);
  multiply_codes(device, sc.q, sc.sx, m, 1, w.k, w, bias, bias_dtype, out, ldo, stream);
  return true;
}

bool fp8_linear_rms_norm(int device, bool fused, const Rows& x, const Rows& other, int64_t d,
                         const void* norm_weight, DType norm_dtype, float eps, const Fp8Weight& w,
                         const void* bias, DType bias_dtype, float* out, int64_t ldo) {
  static const bool on = env_switch_on("RADIXLM_FP8_FUSED_NORM");
  check_fp8_weight(w);
  const int64_t m = x.n0 * x.n1;
  if (!on || w.block_n != 0 || w.k != d || m == 0 || w.n == 0 || d == 0) return false;
  CudaContext& ctx = CudaContext::get(device);
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  auto lock = ctx.lock();
  const CodesScratch sc = codes_scratch(ctx, m, d, 1);
  if (!rms_norm_fp8_applies(x, other, d, sc.q)) return false;
  rms_norm_fp8(device, fused, x, other, d, norm_weight, norm_dtype, eps,
               Fp8RowCodes{sc.q, sc.sx, w.input_scale});
  multiply_codes(device, sc.q, sc.sx, m, 1, d, w, bias, bias_dtype, out, ldo, stream);
  return true;
}

}  // namespace rlm::cuda
