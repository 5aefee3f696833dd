#include "kernels/cuda/rms_norm.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

__device__ __forceinline__ float* row_ptr(const Rows& r, int64_t row) {
  return r.data + (row / r.n1) * r.stride0 + (row % r.n1) * r.stride1;
}

// One block per row. kFused: residual += x first, then normalise residual into x.
// Each thread touches the same elements in both passes, so in-place (out == x) is safe.
template <bool kFused, typename W>
__global__ void rms_norm_kernel(Rows x, Rows other, int64_t d, const W* weight, float eps) {
  const int64_t row = blockIdx.x;
  float* xr = row_ptr(x, row);
  float* orow = row_ptr(other, row);  // kFused: residual row; else: output row
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    float v = xr[k];
    if constexpr (kFused) {
      v = orow[k] + v;
      orow[k] = v;
    }
    sum += static_cast<double>(v) * v;
  }
  sum = block_sum(sum);
  const float variance = static_cast<float>(sum / static_cast<double>(d));
  const float inv = 1.0f / sqrtf(variance + eps);
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    const float w = to_float(weight[k]);
    if constexpr (kFused) {
      xr[k] = w * (orow[k] * inv);
    } else {
      orow[k] = w * (xr[k] * inv);
    }
  }
}

template <bool kFused>
void launch_rms_norm(const Rows& x, const Rows& other, int64_t d, const void* weight, DType weight_dtype, float eps,
                     cudaStream_t stream) {
  const int64_t rows = x.n0 * x.n1;
  if (rows == 0 || d == 0) return;
  RLM_CHECK(rows <= 0x7fffffff) << "rms_norm: too many rows " << rows;
  dispatch_float(weight_dtype, [&](auto w) {
    using W = decltype(w);
    rms_norm_kernel<kFused, W><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(
        x, other, d, static_cast<const W*>(weight), eps);
    RLM_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void rms_norm(int device, const Rows& x, const Rows& out, int64_t d, const void* weight, DType weight_dtype,
              float eps) {
  launch_rms_norm<false>(x, out, d, weight, weight_dtype, eps,
                         static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

void fused_add_rms_norm(int device, const Rows& x, const Rows& residual, int64_t d, const void* weight,
                        DType weight_dtype, float eps) {
  launch_rms_norm<true>(x, residual, d, weight, weight_dtype, eps,
                        static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

}  // namespace rlm::cuda
