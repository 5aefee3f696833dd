// Device steps of the decode GEMVs' fusions (gemv_fusion.h), shared by the 16-bit GEMV (gemv.cu)
// and the block-quantized one (quant_matmul.cu). Included only by .cu files.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/gemv_fusion.h"
#include "kernels/cuda/silu.cuh"

namespace rlm::cuda {

// inv[q] from the block's sums of squares of each row (every thread calls it), as rows_inv_rms.
template <int M>
__device__ __forceinline__ void inv_rms_from_squares(double (&sq)[M], int64_t k, float eps, float (&inv)[M]) {
#pragma unroll
  for (int q = 0; q < M; ++q) {
    const double sum = block_sum(sq[q]);
    inv[q] = 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(k)) + eps);
  }
}

// inv[i] = 1 / sqrt(mean(x_i^2) + eps) for the M rows of x (f32 [M, k], row stride ldx), as the
// RMSNorm kernels compute it (rms_norm_row.cuh: squares summed in double, where f32 products are
// exact, so the sum's order hardly matters; the variance rounded to f32). Every thread of the block
// calls it and gets every row's value.
template <int M>
__device__ __forceinline__ void rows_inv_rms(const float* __restrict__ x, int64_t k, int64_t ldx, float eps,
                                             float (&inv)[M]) {
  double sq[M] = {};
#pragma unroll
  for (int i = 0; i < M; ++i) {
    for (int64_t c = threadIdx.x; c < k; c += blockDim.x) {
      const double v = x[i * ldx + c];
      sq[i] += v * v;
    }
  }
  inv_rms_from_squares<M>(sq, k, eps, inv);
}

// Value c of normalized row i: w * (x * inv), rms_norm's expression.
__device__ __forceinline__ float normed(float x, float inv, const GemvFusion& f, int64_t c) {
  return load_as_float(f.norm_weight, f.norm_dtype, c) * (x * inv);
}

// The norm weight's line holding column c into L1 (before the PDL wait: the weight is constant).
__device__ __forceinline__ void prefetch_norm_weight(const GemvFusion& f, int64_t c) {
  const char* p = static_cast<const char*>(f.norm_weight) + c * (f.norm_dtype == DType::kF32 ? 4 : 2);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

// out[o] = v, or with accumulate prev + v, prev being out[o] as read before (load_prev: the read
// is issued before the row's dot product so that its latency hides behind it). The add is rounded
// on its own (no FMA with a product that made v): the bits of an add after the op that made v.
__device__ __forceinline__ float load_prev(const float* __restrict__ out, int64_t o, bool accumulate) {
  return accumulate ? out[o] : 0.0f;
}
__device__ __forceinline__ void store_out(float* __restrict__ out, int64_t o, float v, bool accumulate,
                                          float prev) {
  out[o] = accumulate ? __fadd_rn(prev, v) : v;
}

// Sum of squares of one thread's values in double (f32 products are exact in double), into the
// accumulator of their row r < M.
template <int M>
__device__ __forceinline__ void add_squares(double (&sq)[M], int64_t r, const float (&v)[8]) {
  double s = 0.0;
#pragma unroll
  for (int e = 0; e < 8; ++e) s += static_cast<double>(v[e]) * v[e];
#pragma unroll
  for (int q = 0; q < M; ++q) {
    if (r == q) sq[q] += s;
  }
}

// inv[r] for a row index r < M known only at run time.
template <int M>
__device__ __forceinline__ float inv_of_row(const float (&inv)[M], int64_t r) {
  float v = inv[0];
#pragma unroll
  for (int q = 1; q < M; ++q) v = r == q ? inv[q] : v;
  return v;
}

// Values c .. c + 7 of row r normalized in place (c: their column).
template <int M>
__device__ __forceinline__ void normalize8(float (&v)[8], const float (&inv)[M], int64_t r,
                                           const GemvFusion& f, int64_t c) {
  const float inv_r = inv_of_row<M>(inv, r);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = normed(v[e], inv_r, f, c + e);
}

// The SiLU-and-mul epilogue's value from the gate and up sums (bias included).
__device__ __forceinline__ float silu_mul(float gate, float up) { return silu_f32(gate) * up; }

}  // namespace rlm::cuda
