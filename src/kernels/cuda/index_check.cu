#include "kernels/cuda/index_check.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

__global__ void find_out_of_range_kernel(const void* idx, bool is_i64, int64_t n, int64_t stride, int64_t limit,
                                         unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = load_index(idx, is_i64, i, stride);
    if (v < 0 || v >= limit) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

}  // namespace

BadIndex find_out_of_range(int device, const void* idx, DType dtype, int64_t n, int64_t stride, int64_t limit) {
  RLM_CHECK(dtype == DType::kI32 || dtype == DType::kI64) << "index tensor dtype " << dtype_name(dtype);
  BadIndex bad;
  if (n <= 0) return bad;
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();
  auto* flag = static_cast<unsigned long long*>(ctx.flag_buffer());
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  RLM_CUDA_CHECK(cudaMemsetAsync(flag, 0xFF, sizeof(unsigned long long), stream));
  find_out_of_range_kernel<<<grid_for(n), kBlock, 0, stream>>>(idx, dtype == DType::kI64, n, stride, limit, flag);
  RLM_CUDA_CHECK_LAUNCH();
  unsigned long long first = 0;
  RLM_CUDA_CHECK(cudaMemcpyAsync(&first, flag, sizeof(first), cudaMemcpyDeviceToHost, stream));
  RLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first == ~0ull) return bad;
  bad.position = static_cast<int64_t>(first);
  const size_t es = dtype_size(dtype);
  const char* at = static_cast<const char*>(idx) + static_cast<size_t>(bad.position * stride) * es;
  if (dtype == DType::kI64) {
    RLM_CUDA_CHECK(cudaMemcpy(&bad.value, at, 8, cudaMemcpyDeviceToHost));
  } else {
    int32_t v = 0;
    RLM_CUDA_CHECK(cudaMemcpy(&v, at, 4, cudaMemcpyDeviceToHost));
    bad.value = v;
  }
  return bad;
}

}  // namespace rlm::cuda
