#include "kernels/cuda/softmax.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/softmax_row.cuh"

namespace rlm::cuda {
namespace {

// One block per row: max, sum of exp (double), then the write pass.
template <bool kLog>
__global__ void softmax_kernel(float* x, int64_t v, int64_t ld) {
  float* row = x + blockIdx.x * ld;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max(m);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += static_cast<double>(expf(row[j] - m));
  sum = block_sum(sum);
  if constexpr (kLog) {
    const float log_sum = static_cast<float>(log(sum));
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) row[j] = (row[j] - m) - log_sum;
  } else {
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) row[j] = expf(row[j] - m) * inv;
  }
}

__global__ void argmax_kernel(const float* x, int64_t v, int64_t ld, int32_t* out, int64_t out_stride) {
  const int64_t best = block_argmax(x + blockIdx.x * ld, v);
  if (threadIdx.x == 0) out[blockIdx.x * out_stride] = static_cast<int32_t>(best);
}

template <bool kLog>
void launch_softmax(float* x, int64_t n, int64_t v, int64_t ld, cudaStream_t stream) {
  if (n == 0 || v == 0) return;
  RLM_CHECK(n <= 0x7fffffff) << "softmax: too many rows " << n;
  softmax_kernel<kLog><<<static_cast<unsigned>(n), kBlock, 0, stream>>>(x, v, ld);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax(int device, float* x, int64_t n, int64_t v, int64_t ld) {
  launch_softmax<false>(x, n, v, ld, static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

void log_softmax(int device, float* x, int64_t n, int64_t v, int64_t ld) {
  launch_softmax<true>(x, n, v, ld, static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

void argmax(int device, const float* x, int64_t n, int64_t v, int64_t ld, int32_t* out, int64_t out_stride) {
  if (n == 0) return;
  RLM_CHECK(n <= 0x7fffffff && v > 0) << "argmax: bad shape [" << n << ", " << v << "]";
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  argmax_kernel<<<static_cast<unsigned>(n), kBlock, 0, stream>>>(x, v, ld, out, out_stride);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
