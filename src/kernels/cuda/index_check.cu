#include "kernels/cuda/index_check.h"

#include <array>
#include <mutex>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

thread_local int g_deferred_depth = 0;

__global__ void find_out_of_range_kernel(const void* idx, bool is_i64, int64_t n, int64_t stride, int64_t limit,
                                         unsigned long long* first_bad) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = load_index(idx, is_i64, i, stride);
    if (v < 0 || v >= limit) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

const char* op_name(int32_t op) {
  switch (static_cast<IndexErrorOp>(op)) {
    case IndexErrorOp::kEmbedding: return "embedding: token id";
    case IndexErrorOp::kKvStore: return "store_kv_cache: out_cache_loc slot";
    case IndexErrorOp::kRotary: return "rotary_embedding: position";
    case IndexErrorOp::kReqToToken: return "req_to_token mirror update: slot";
    default: return "unknown op: index";
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
  int64_t v64 = 0;
  int32_t v32 = 0;
  RLM_CUDA_CHECK(cudaMemcpyAsync(dtype == DType::kI64 ? static_cast<void*>(&v64) : static_cast<void*>(&v32), at, es,
                                 cudaMemcpyDeviceToHost, stream));
  RLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  bad.value = dtype == DType::kI64 ? v64 : v32;
  return bad;
}

DeviceErrorRecord* device_error_record(int device) {
  static std::array<DeviceErrorRecord*, 64> records{};
  static std::mutex mutex;
  RLM_CHECK(device >= 0 && device < 64) << "CUDA device index " << device << " out of range";
  std::lock_guard<std::mutex> lock(mutex);
  if (records[device] == nullptr) {
    set_device(device);
    void* p = nullptr;
    RLM_CUDA_CHECK(cudaMalloc(&p, sizeof(DeviceErrorRecord)));  // raw: graphs reference it for ever
    RLM_CUDA_CHECK(cudaMemset(p, 0, sizeof(DeviceErrorRecord)));
    records[device] = static_cast<DeviceErrorRecord*>(p);
  }
  return records[device];
}

DeferredIndexChecks::DeferredIndexChecks() { ++g_deferred_depth; }
DeferredIndexChecks::~DeferredIndexChecks() { --g_deferred_depth; }
bool DeferredIndexChecks::active() { return g_deferred_depth > 0; }

std::optional<std::string> take_device_error(int device) {
  DeviceErrorRecord* rec = device_error_record(device);
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  DeviceErrorRecord host;
  RLM_CUDA_CHECK(cudaMemcpyAsync(&host, rec, sizeof(host), cudaMemcpyDeviceToHost, stream));
  RLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.op == 0 && host.kv_indices == 0) return std::nullopt;
  RLM_CUDA_CHECK(cudaMemsetAsync(rec, 0, sizeof(DeviceErrorRecord), stream));
  if (host.op == 0) {
    return str("build_kv_indices: request ", host.kv_indices - 1,
               " of the batch has a bad req_to_token row or seq_len, or its pages overflow the index buffer");
  }
  return str(op_name(host.op), " ", host.value, " at position ", host.position, " is outside [0, ", host.limit,
             ") (found on the device; the step's results are invalid)");
}

}  // namespace rlm::cuda
