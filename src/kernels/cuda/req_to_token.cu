#include "kernels/cuda/req_to_token.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

__global__ void scatter_kernel(int32_t* table, int64_t table_numel, const int64_t* entries, int64_t n,
                               int64_t num_slots, DeviceErrorRecord* rec) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = entries[2 * i], slot = entries[2 * i + 1];
    if (at < 0 || at >= table_numel || slot < 0 || slot >= num_slots) {
      record_index_error(rec, IndexErrorOp::kReqToToken, at, slot, num_slots);
      continue;
    }
    table[at] = static_cast<int32_t>(slot);
  }
}

}  // namespace

void scatter_req_to_token(int device, int32_t* table, int64_t table_numel, const int64_t* entries, int64_t n,
                          int64_t num_slots) {
  if (n == 0) return;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  scatter_kernel<<<grid_for(n), kBlock, 0, stream>>>(table, table_numel, entries, n, num_slots,
                                                     device_error_record(device));
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
