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

// First index of the maximum of row[0, v) (NaNs skipped; 0 when every entry is NaN). All threads
// of the block must call it; every thread gets the result.
__device__ inline int64_t block_argmax(const float* row, int64_t v) {
  __shared__ float warp_v[32];
  __shared__ int64_t warp_i[32];
  float best_v = 0.0f;
  int64_t best_i = -1;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    const float x = row[j];
    if (!isnan(x) && argmax_better(x, j, best_v, best_i)) {
      best_v = x;
      best_i = j;
    }
  }
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
