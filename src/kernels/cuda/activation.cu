#include "kernels/cuda/activation.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

// One thread per output element; grid-stride. In place on the gate half is safe: each element
// is read and written by the same thread.
__global__ void silu_and_mul_kernel(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo) {
  const int64_t total = n * inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / inter, j = idx % inter;
    const float g = x[r * ldx + j];
    const float u = x[r * ldx + inter + j];
    out[r * ldo + j] = (g / (1.0f + expf(-g))) * u;
  }
}

void launch_silu_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo,
                         cudaStream_t stream) {
  if (n * inter == 0) return;
  silu_and_mul_kernel<<<grid_for(n * inter), kBlock, 0, stream>>>(x, n, inter, ldx, out, ldo);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void silu_and_mul(int device, const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo) {
  launch_silu_and_mul(x, n, inter, ldx, out, ldo, static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

}  // namespace rlm::cuda
