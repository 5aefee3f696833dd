// The register RMSNorm's per-thread steps over one row of d floats held as float4s, thread t of the
// block holding float4s t, t + blockDim.x, ... (kVec slots; slots past the row's d / 4 unused).
// rms_norm_vec_kernel (rms_norm.cu) and the custom all-reduce's fused norm
// (custom_all_reduce.cu) both run these, so the two give the same bits for the same row.
// Included only by .cu files.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {

// The most float4s a thread holds: rows of up to 4 * kRowMaxVec * kBlock (8,192) floats.
inline constexpr int kRowMaxVec = 8;

// The float4 slots a thread needs for rows of d floats (kBlock threads a row).
inline int64_t row_slots(int64_t d) { return (d / 4 + kBlock - 1) / kBlock; }

// Whether rows of d floats fit these steps: whole float4s, at most kRowMaxVec slots a thread.
inline bool row_width_fits(int64_t d) { return d % 4 == 0 && row_slots(d) <= kRowMaxVec; }

// The index (in float4s) of this thread's slot u of the row.
__device__ __forceinline__ int64_t row_slot(int u) {
  return threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
}

// wf[u] = the weights of slot u, as floats.   weight: [d] with d4 = d / 4.
template <typename W, int kVec>
__device__ __forceinline__ void load_row_weights(const W* weight, int64_t d4, float4 (&wf)[kVec]) {
#pragma unroll
  for (int u = 0; u < kVec; ++u) {
    const int64_t k = row_slot(u);
    if (k < d4) {
      const W* w = weight + 4 * k;
      wf[u] = make_float4(to_float(w[0]), to_float(w[1]), to_float(w[2]), to_float(w[3]));
    }
  }
}

// 1 / sqrt(mean(row^2) + eps): each thread's squares summed in double slot by slot (float products
// are exact in double), then block_sum. Every thread of the block calls it. kKeep: the row is also
// stored to `keep`, slot by slot as it is summed (the fused norm's residual).
template <bool kKeep, int kVec>
__device__ __forceinline__ float row_inv_rms(const float4 (&v)[kVec], int64_t d4, int64_t d, float eps,
                                             float4* keep) {
  double sum = 0.0;
#pragma unroll
  for (int u = 0; u < kVec; ++u) {
    const int64_t k = row_slot(u);
    if (k < d4) {
      if constexpr (kKeep) keep[k] = v[u];
      sum += static_cast<double>(v[u].x) * v[u].x;
      sum += static_cast<double>(v[u].y) * v[u].y;
      sum += static_cast<double>(v[u].z) * v[u].z;
      sum += static_cast<double>(v[u].w) * v[u].w;
    }
  }
  sum = block_sum(sum);
  const float variance = static_cast<float>(sum / static_cast<double>(d));
  return 1.0f / sqrtf(variance + eps);
}

// v = w * (v * inv), elementwise over this thread's slots, each slot stored to dst as it is done.
template <int kVec>
__device__ __forceinline__ void scale_row(float4 (&v)[kVec], const float4 (&wf)[kVec], float inv, int64_t d4,
                                          float4* dst) {
#pragma unroll
  for (int u = 0; u < kVec; ++u) {
    const int64_t k = row_slot(u);
    if (k < d4) {
      v[u] = make_float4(wf[u].x * (v[u].x * inv), wf[u].y * (v[u].y * inv), wf[u].z * (v[u].z * inv),
                         wf[u].w * (v[u].w * inv));
      dst[k] = v[u];
    }
  }
}

}  // namespace rlm::cuda
