#include "kernels/cuda/index_check.h"

#include <array>
#include <cstring>
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

namespace {

struct ErrorBuffers {
  DeviceErrorRecord* device = nullptr;  // raw cudaMalloc: graphs reference it for ever
  DeviceErrorRecord* pinned = nullptr;  // host copy written by enqueue_error_readback
};

ErrorBuffers& error_buffers(int device) {
  static std::array<ErrorBuffers, 64> buffers{};
  static std::mutex mutex;
  RLM_CHECK(device >= 0 && device < 64) << "CUDA device index " << device << " out of range";
  std::lock_guard<std::mutex> lock(mutex);
  ErrorBuffers& b = buffers[device];
  if (b.device == nullptr) {
    set_device(device);
    void* p = nullptr;
    RLM_CUDA_CHECK(cudaMalloc(&p, sizeof(DeviceErrorRecord)));
    RLM_CUDA_CHECK(cudaMemset(p, 0, sizeof(DeviceErrorRecord)));
    void* h = nullptr;
    RLM_CUDA_CHECK(cudaMallocHost(&h, sizeof(DeviceErrorRecord)));
    *static_cast<DeviceErrorRecord*>(h) = DeviceErrorRecord{};
    b.device = static_cast<DeviceErrorRecord*>(p);
    b.pinned = static_cast<DeviceErrorRecord*>(h);
  }
  return b;
}

std::optional<std::string> describe_error(const DeviceErrorRecord& host) {
  if (host.op == 0 && host.kv_indices == 0) return std::nullopt;
  if (host.op == 0) {
    return str("build_kv_indices: request ", host.kv_indices - 1,
               " of the batch has a bad req_to_token row or seq_len, or its pages overflow the index buffer");
  }
  return str(op_name(host.op), " ", host.value, " at position ", host.position, " is outside [0, ", host.limit,
             ") (found on the device; the step's results are invalid)");
}

}  // namespace

DeviceErrorRecord* device_error_record(int device) { return error_buffers(device).device; }

DeviceErrorRecord* check_token_ids(int device, const int32_t* ids, int64_t n, int64_t stride, int64_t vocab_size) {
  if (DeferredIndexChecks::active()) return device_error_record(device);
  const BadIndex bad = find_out_of_range(device, ids, DType::kI32, n, stride, vocab_size);
  if (bad.position >= 0) {
    fail(str("embedding: token id ", bad.value, " at position ", bad.position, " is outside the vocabulary [0, ",
             vocab_size, ")"));
  }
  return nullptr;
}

DeferredIndexChecks::DeferredIndexChecks() { ++g_deferred_depth; }
DeferredIndexChecks::~DeferredIndexChecks() { --g_deferred_depth; }
bool DeferredIndexChecks::active() { return g_deferred_depth > 0; }

std::optional<std::string> take_device_error(int device) {
  ErrorBuffers& b = error_buffers(device);
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  DeviceErrorRecord host;
  RLM_CUDA_CHECK(cudaMemcpyAsync(&host, b.device, sizeof(host), cudaMemcpyDeviceToHost, stream));
  RLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::optional<std::string> msg = describe_error(host);
  if (msg) {
    RLM_CUDA_CHECK(cudaMemsetAsync(b.device, 0, sizeof(DeviceErrorRecord), stream));
    *b.pinned = DeviceErrorRecord{};
  }
  return msg;
}

void enqueue_error_readback(int device) {
  ErrorBuffers& b = error_buffers(device);
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  RLM_CUDA_CHECK(cudaMemcpyAsync(b.pinned, b.device, sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost, stream));
}

std::optional<std::string> poll_device_error(int device) {
  ErrorBuffers& b = error_buffers(device);
  DeviceErrorRecord copy;
  std::memcpy(&copy, b.pinned, sizeof(copy));  // written by the DMA queued in enqueue_error_readback
  std::optional<std::string> msg = describe_error(copy);
  if (msg) {
    const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
    RLM_CUDA_CHECK(cudaMemsetAsync(b.device, 0, sizeof(DeviceErrorRecord), stream));
    *b.pinned = DeviceErrorRecord{};
  }
  return msg;
}

}  // namespace rlm::cuda
