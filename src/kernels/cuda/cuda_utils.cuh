// Device helpers shared by the CUDA kernels: f32 <-> storage-type conversion, block reductions,
// the dtype -> C++ type dispatch and grid sizing. Included only by .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cuda/index_check.h"

namespace rlm::cuda {

inline constexpr int kBlock = 256;  // threads per block for the row kernels

// 16-byte load of constant data that does not allocate in L1 (weights streamed once by the GEMVs);
// p is 16-byte aligned.
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

// Element c of a vector (a bias, a norm weight) of dtype f32/bf16/f16, as a float.
__device__ __forceinline__ float load_as_float(const void* p, DType dtype, int64_t c) {
  switch (dtype) {
    case DType::kBF16: return to_float(static_cast<const __nv_bfloat16*>(p)[c]);
    case DType::kF16: return to_float(static_cast<const __half*>(p)[c]);
    default: return static_cast<const float*>(p)[c];
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
// Nearest even, saturating to +-448, NaN stays NaN (f32_to_f8e4m3's bits).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// Index tensors are i32 or i64 with any stride.
__device__ __forceinline__ int64_t load_index(const void* p, bool is_i64, int64_t i, int64_t stride) {
  return is_i64 ? static_cast<const int64_t*>(p)[i * stride]
                : static_cast<int64_t>(static_cast<const int32_t*>(p)[i * stride]);
}

// Deferred index checks: the first bad index of a step claims the device error record (see
// index_check.h); rec == nullptr when the op was checked on the host already.
__device__ __forceinline__ void record_index_error(DeviceErrorRecord* rec, IndexErrorOp op, int64_t position,
                                                   int64_t value, int64_t limit) {
  if (rec == nullptr) return;
  if (atomicCAS(&rec->op, 0, static_cast<int32_t>(op)) == 0) {
    rec->position = position;
    rec->value = value;
    rec->limit = limit;
  }
}

// Sum over the block (all threads must call; blockDim.x a multiple of 32, <= 1024). The result is
// returned to every thread. Deterministic: fixed shuffle tree, then a fixed order over warps.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  T total = 0;
  const int num_warps = blockDim.x / 32;
  for (int w = 0; w < num_warps; ++w) total += warp_sums[w];
  return total;
}

// Max over the block (NaNs ignored by fmaxf), returned to every thread.
__device__ inline float block_max(float v) {
  __shared__ float warp_max[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  float m = warp_max[0];
  const int num_warps = blockDim.x / 32;
  for (int w = 1; w < num_warps; ++w) m = fmaxf(m, warp_max[w]);
  return m;
}

// Blocks for a grid-stride loop over n items.
inline unsigned grid_for(int64_t n, int block = kBlock) {
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

// Calls f(T{}) with T the CUDA storage type of a float dtype.
template <typename F>
void dispatch_float(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f(float{}); return;
    case DType::kBF16: f(__nv_bfloat16{}); return;
    case DType::kF16: f(__half{}); return;
    default: fail(str("CUDA kernel: unsupported float dtype ", dtype_name(dtype)));
  }
}

// dispatch_float plus f8e4m3 (__nv_fp8_e4m3): the KV-cache dtypes.
template <typename F>
void dispatch_cache(DType dtype, F&& f) {
  if (dtype == DType::kF8E4M3) return f(__nv_fp8_e4m3{});
  dispatch_float(dtype, std::forward<F>(f));
}

}  // namespace rlm::cuda
