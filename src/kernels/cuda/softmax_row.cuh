// Block-level row helpers shared by the softmax and sampling kernels. Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace rlm::cuda {

// True when candidate (v, i) beats (best_v, best_i): larger value, or equal value and lower index;
// an index < 0 means "nothing yet".
__device__ __forceinline__ bool argmax_better(float v, int64_t i, float best_v, int64_t best_i) {
  if (i < 0) return false;
  if (best_i < 0) return true;
  return v > best_v || (v == best_v && i < best_i);
}

// Calls f(row[j], j) for this thread's share of row[0, v) (the block's threads split the row; each
// j is visited by exactly one thread, in no fixed order). A 16-byte-aligned row is read as float4,
// kUnroll independent loads at a time: a loop of one 4-byte load per iteration keeps a block
// waiting on memory latency (one block scanning a 128k vocabulary took ~0.2 ms that way).
template <typename F>
__device__ __forceinline__ void for_each_in_row(const float* row, int64_t v, F&& f) {
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    constexpr int kUnroll = 8;
    const float4* r4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = v / 4, stride = blockDim.x;
    int64_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * stride < n4; i += kUnroll * stride) {
      float4 q[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) q[u] = r4[i + u * stride];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = 4 * (i + u * stride);
        f(q[u].x, j);
        f(q[u].y, j + 1);
        f(q[u].z, j + 2);
        f(q[u].w, j + 3);
      }
    }
    for (; i < n4; i += stride) {
      const float4 q = r4[i];
      f(q.x, 4 * i);
      f(q.y, 4 * i + 1);
      f(q.z, 4 * i + 2);
      f(q.w, 4 * i + 3);
    }
    done = 4 * n4;
  }
  for (int64_t j = done + threadIdx.x; j < v; j += blockDim.x) f(row[j], j);
}

// First index of the maximum of row[0, v) (NaNs skipped; 0 when every entry is NaN). All threads
// of the block must call it; every thread gets the result.
__device__ inline int64_t block_argmax(const float* row, int64_t v) {
  __shared__ float warp_v[32];
  __shared__ int64_t warp_i[32];
  float best_v = 0.0f;
  int64_t best_i = -1;
  // (value desc, index asc) is a total order, so the visiting order does not change the result.
  for_each_in_row(row, v, [&](float x, int64_t j) {
    if (!isnan(x) && argmax_better(x, j, best_v, best_i)) {
      best_v = x;
      best_i = j;
    }
  });
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (argmax_better(ov, oi, best_v, best_i)) {
      best_v = ov;
      best_i = oi;
    }
  }
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_v[warp] = best_v;
    warp_i[warp] = best_i;
  }
  __syncthreads();
  best_v = warp_v[0];
  best_i = warp_i[0];
  const int num_warps = blockDim.x / 32;
  for (int w = 1; w < num_warps; ++w) {
    if (argmax_better(warp_v[w], warp_i[w], best_v, best_i)) {
      best_v = warp_v[w];
      best_i = warp_i[w];
    }
  }
  return best_i < 0 ? 0 : best_i;
}

// Scans value(0), value(1), ..., value(len - 1) in order (value(i) >= 0, summed in double, chunk
// by chunk of blockDim.x with a shared-memory inclusive scan) and returns the first index i whose
// running sum prefix(i) crosses `target`: prefix(i) >= target when kGreaterEqual, else
// prefix(i) > target. Returns -1 when no prefix crosses. All threads call; all get the result.
// blockDim.x must be kScanBlock.
inline constexpr int kScanBlock = 256;
template <bool kGreaterEqual, typename F>
__device__ int64_t block_first_crossing(F value, int64_t len, double target) {
  __shared__ double scan[kScanBlock];
  __shared__ int64_t found;
  __shared__ double chunk_total;
  if (threadIdx.x == 0) found = -1;
  __syncthreads();
  double base = 0.0;
  for (int64_t start = 0; start < len; start += blockDim.x) {
    const int64_t i = start + threadIdx.x;
    scan[threadIdx.x] = i < len ? value(i) : 0.0;
    __syncthreads();
    for (int off = 1; off < static_cast<int>(blockDim.x); off <<= 1) {
      const double add = threadIdx.x >= static_cast<unsigned>(off) ? scan[threadIdx.x - off] : 0.0;
      __syncthreads();
      scan[threadIdx.x] += add;
      __syncthreads();
    }
    const double prefix = base + scan[threadIdx.x];
    const bool crosses = i < len && (kGreaterEqual ? prefix >= target : prefix > target);
    // The first crossing in the chunk: prefixes are non-decreasing, so it is the lowest thread.
    if (crosses && (threadIdx.x == 0 || !(kGreaterEqual ? base + scan[threadIdx.x - 1] >= target
                                                         : base + scan[threadIdx.x - 1] > target))) {
      found = i;
    }
    if (threadIdx.x == blockDim.x - 1) chunk_total = scan[threadIdx.x];
    __syncthreads();
    const int64_t f = found;
    base += chunk_total;
    __syncthreads();  // everyone has read found/chunk_total/scan before the next chunk overwrites them
    if (f >= 0) return f;
  }
  return -1;
}

}  // namespace rlm::cuda
