#include "kernels/cuda/token_table.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

__global__ void scatter_tokens_kernel(const int32_t* values, const int32_t* slots, int64_t n, int32_t* table) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    table[slots[i]] = values[i];
  }
}

__global__ void resolve_future_tokens_kernel(int32_t* ids, const int32_t* slots, int64_t n, const int32_t* table) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (ids[i] < 0) ids[i] = table[slots[i]];
  }
}

__global__ void shard_token_ids_kernel(const int32_t* ids, int64_t n, int32_t start, int32_t count, int32_t outside,
                                       int32_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t local = ids[i] - start;
    out[i] = local >= 0 && local < count ? local : outside;
  }
}

}  // namespace

void shard_token_ids(int device, const int32_t* ids, int64_t n, int32_t start, int32_t count, int32_t outside,
                     int32_t* out) {
  if (n == 0) return;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  shard_token_ids_kernel<<<grid_for(n), kBlock, 0, stream>>>(ids, n, start, count, outside, out);
  RLM_CUDA_CHECK_LAUNCH();
}

void scatter_tokens(int device, const int32_t* values, const int32_t* slots, int64_t n, int32_t* table) {
  if (n == 0) return;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  scatter_tokens_kernel<<<grid_for(n), kBlock, 0, stream>>>(values, slots, n, table);
  RLM_CUDA_CHECK_LAUNCH();
}

void resolve_future_tokens(int device, int32_t* ids, const int32_t* slots, int64_t n, const int32_t* table) {
  if (n == 0) return;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  resolve_future_tokens_kernel<<<grid_for(n), kBlock, 0, stream>>>(ids, slots, n, table);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
