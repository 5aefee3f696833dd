#include "kernels/cuda/linear.h"

#include <cublas_v2.h>

#include <atomic>

#include "core/cuda_check.h"
#include "core/env.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/gemv.cuh"

namespace rlm::cuda {
namespace {

// x (f32, row stride ldx) -> dst (T, contiguous [m, k]); one thread per element, grid-stride.
template <typename T>
__global__ void convert_rows_kernel(const float* x, int64_t m, int64_t k, int64_t ldx, T* dst) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * k;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / k, c = idx % k;
    dst[idx] = from_float<T>(x[i * ldx + c]);
  }
}

// out[i, j] += bias[j] (or out[i, j] = 0 when kZero: the k == 0 case); grid-stride over m * n.
template <bool kZero, typename B>
__global__ void bias_kernel(float* out, int64_t m, int64_t n, int64_t ldo, const B* bias) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / n, j = idx % n;
    if constexpr (kZero) {
      out[i * ldo + j] = 0.0f;
    } else {
      out[i * ldo + j] += to_float(bias[j]);
    }
  }
}

// The same for rows of float4s (k and ldx multiples of 4, x 16-byte aligned): four elements per
// thread from one 16-byte load, one index division per four (the scalar kernel's per-element 64-bit
// division and 4-byte loads ran at about half the copy rate).
template <typename T>
__global__ void convert_rows4_kernel(const float4* x, int64_t m, int64_t k4, int64_t ldx4, T* dst) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * k4;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / k4, c = idx - i * k4;
    const float4 v = x[i * ldx4 + c];
    T* d = dst + 4 * idx;
    d[0] = from_float<T>(v.x);
    d[1] = from_float<T>(v.y);
    d[2] = from_float<T>(v.z);
    d[3] = from_float<T>(v.w);
  }
}

template <typename T>
void launch_convert_rows(const float* x, int64_t m, int64_t k, int64_t ldx, T* dst, cudaStream_t stream) {
  if (k % 4 == 0 && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    convert_rows4_kernel<T><<<grid_for(m * k / 4), kBlock, 0, stream>>>(reinterpret_cast<const float4*>(x), m, k / 4,
                                                                         ldx / 4, dst);
  } else {
    convert_rows_kernel<T><<<grid_for(m * k), kBlock, 0, stream>>>(x, m, k, ldx, dst);
  }
  RLM_CUDA_CHECK_LAUNCH();
}

template <bool kZero, typename B>
void launch_bias(float* out, int64_t m, int64_t n, int64_t ldo, const B* bias, cudaStream_t stream) {
  bias_kernel<kZero, B><<<grid_for(m * n), kBlock, 0, stream>>>(out, m, n, ldo, bias);
  RLM_CUDA_CHECK_LAUNCH();
}

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: fail(str("linear: unsupported weight dtype ", dtype_name(dtype)));
  }
}

// RADIXLM_LINEAR_GEMV=0 in the environment starts with the GEMV path off.
std::atomic<bool>& gemv_flag() {
  static std::atomic<bool> flag(env_switch_on("RADIXLM_LINEAR_GEMV"));
  return flag;
}

int as_int(int64_t v, const char* what) {
  RLM_CHECK(v >= 0 && v <= 0x7fffffff) << "linear: " << what << " = " << v << " does not fit cuBLAS's int";
  return static_cast<int>(v);
}

}  // namespace

void set_linear_gemv_enabled(bool enabled) { gemv_flag().store(enabled, std::memory_order_relaxed); }

bool linear_gemv_enabled() { return gemv_flag().load(std::memory_order_relaxed); }

bool linear_uses_gemv(int device, int64_t m, int64_t k, const void* weight, DType weight_dtype, int64_t ldw) {
  return linear_gemv_enabled() && gemv_supported(device, m, k, weight, weight_dtype, ldw);
}

int64_t linear_gemv_max_x_bytes(int device) { return gemv_max_smem_bytes(device); }

bool linear_fused(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                  DType weight_dtype, int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out,
                  int64_t ldo, const GemvFusion& f) {
  if (!linear_gemv_enabled() || !gemv_fused_supported(device, m, k, weight, weight_dtype, ldw, n, f))
    return false;
  gemv_fused_launch(device, x, m, k, ldx, weight, weight_dtype, n, ldw, bias, bias_dtype, out, ldo, f,
                    static_cast<cudaStream_t>(CudaContext::get(device).stream()));
  return true;
}

void linear(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight, DType weight_dtype,
            int64_t n, int64_t ldw, const void* bias, DType bias_dtype, float* out, int64_t ldo) {
  if (m == 0 || n == 0) return;
  if (linear_uses_gemv(device, m, k, weight, weight_dtype, ldw)) {
    gemv_launch(device, x, m, k, ldx, weight, weight_dtype, n, ldw, bias, bias_dtype, out, ldo,
                static_cast<cudaStream_t>(CudaContext::get(device).stream()));
    return;
  }
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();  // guards the scratch and the handle
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  if (k == 0) {
    launch_bias<true, float>(out, m, n, ldo, nullptr, stream);
  } else {
    // Row-major out[m, n] = x[m, k] @ W[n, k]^T is column-major out^T[n, m] = W^T-as-stored... i.e.
    // C(n x m, ldc = ldo) = op(A) * B with A = W stored column-major as (k x n, lda = ldw), op = T,
    // and B = x stored column-major as (k x m, ldb = ldx).
    const void* b = x;
    int64_t ldb = ldx;
    const cudaDataType_t type = cuda_type(weight_dtype);
    if (weight_dtype != DType::kF32) {
      void* xs = ctx.scratch(static_cast<size_t>(m * k) * dtype_size(weight_dtype));
      dispatch_float(weight_dtype, [&](auto t) {
        using T = decltype(t);
        launch_convert_rows(x, m, k, ldx, static_cast<T*>(xs), stream);
      });
      b = xs;
      ldb = k;
    }
    const float alpha = 1.0f, beta = 0.0f;
    auto handle = static_cast<cublasHandle_t>(ctx.cublas());
    RLM_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, as_int(n, "n"), as_int(m, "m"), as_int(k, "k"),
                                  &alpha, weight, type, as_int(ldw, "ldw"), b, type, as_int(ldb, "ldx"), &beta, out,
                                  CUDA_R_32F, as_int(ldo, "ldo"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias != nullptr) {
    dispatch_float(bias_dtype, [&](auto bt) {
      using B = decltype(bt);
      launch_bias<false, B>(out, m, n, ldo, static_cast<const B*>(bias), stream);
    });
  }
}

}  // namespace rlm::cuda
