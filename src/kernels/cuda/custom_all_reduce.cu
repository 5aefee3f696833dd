#include <cstring>
#include <cuda/atomic>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/custom_all_reduce.h"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 64;

// The signal area at the start of every rank's buffer. start[b][r]: the call count rank r's block b
// last announced to this rank; count[b]: the calls this rank's block b has made.
struct Signals {
  uint32_t start[kMaxBlocks][kCarMaxRanks];
  uint32_t count[kMaxBlocks];
};
constexpr size_t kDataOffset = (sizeof(Signals) + 255) / 256 * 256;
size_t data_area_bytes(size_t max_bytes) { return (max_bytes + 255) / 256 * 256; }

struct Buffers {
  char* p[kCarMaxRanks];
};

__device__ __forceinline__ Signals* signals(const Buffers& b, int r) {
  return reinterpret_cast<Signals*>(b.p[r]);
}
// Rank r's data area for calls of parity `flag & 1` (two areas: see the kernel).
__device__ __forceinline__ uint4* data_of(const Buffers& b, int r, uint32_t flag, int64_t area_bytes) {
  return reinterpret_cast<uint4*>(b.p[r] + kDataOffset + (flag & 1u) * area_bytes);
}

// Block blockIdx.x of every rank meets here: thread r < size tells rank r that this block reached
// call `flag` and waits until rank r's block said at least as much. The barrier before makes the
// block's writes part of what the release store publishes; the one after spreads the acquire to
// the block.
template <int N>
__device__ __forceinline__ void meet(const Buffers& b, int rank, uint32_t flag) {
  __syncthreads();
  if (threadIdx.x < N) {
    const int peer = threadIdx.x;
    uint32_t* out = &signals(b, peer)->start[blockIdx.x][rank];
    uint32_t* in = &signals(b, rank)->start[blockIdx.x][peer];
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system>(*out).store(flag, ::cuda::memory_order_release);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system> wait(*in);
    while (wait.load(::cuda::memory_order_acquire) < flag) {
    }
  }
  __syncthreads();
}

template <typename T>
struct Lanes {
  static constexpr int kN = 16 / sizeof(T);
};

template <typename T>
__device__ __forceinline__ void add_lanes(float* acc, const uint4& v) {
  const T* x = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < Lanes<T>::kN; ++i) acc[i] += to_float(x[i]);
}

template <typename T>
__device__ __forceinline__ uint4 pack_lanes(const float* acc) {
  uint4 out;
  T* y = reinterpret_cast<T*>(&out);
#pragma unroll
  for (int i = 0; i < Lanes<T>::kN; ++i) y[i] = from_float<T>(acc[i]);
  return out;
}

// One-shot all-reduce of nvec 16-byte vectors. Element i belongs to the same block on every rank
// (the mapping depends only on nvec and the grid), so each block meets only its namesakes, once.
// Calls alternate between two data areas, so no second meeting is needed before returning: a rank
// writes an area again two calls later, and it can only start that call after every peer started
// the call in between — by stream order, after each peer's kernel that read the area had ended.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    one_shot_kernel(Buffers b, int rank, uint4* data, int64_t nvec, int64_t area_bytes) {
  __shared__ uint32_t flag_s;
  pdl_wait();
  pdl_launch_dependents();
  if (threadIdx.x == 0) flag_s = signals(b, rank)->count[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t flag = flag_s;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint4* mine = data_of(b, rank, flag, area_bytes);
  for (int64_t i = first; i < nvec; i += step) mine[i] = data[i];
  timeline_mark(0);
  meet<N>(b, rank, flag);
  timeline_mark(1);
  for (int64_t i = first; i < nvec; i += step) {
    float acc[Lanes<T>::kN] = {};
#pragma unroll
    for (int r = 0; r < N; ++r) {
      add_lanes<T>(acc, __ldcg(data_of(b, r, flag, area_bytes) + i));  // L2: never a stale L1 line
    }
    data[i] = pack_lanes<T>(acc);
  }
  if (threadIdx.x == 0) signals(b, rank)->count[blockIdx.x] = flag;
  timeline_mark(3);
}

template <typename T, int N>
void launch(const Buffers& b, int rank, void* data, int64_t nvec, int64_t area_bytes, cudaStream_t stream) {
  const int64_t want = (nvec + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < kMaxBlocks ? want : kMaxBlocks);
  launch_pdl(one_shot_kernel<T, N>, dim3(blocks), dim3(kThreads), 0, stream, b, rank,
             static_cast<uint4*>(data), nvec, area_bytes);
}

template <typename T>
void launch_ranks(const Buffers& b, int rank, int size, void* data, int64_t nvec, int64_t area,
                  cudaStream_t stream) {
  switch (size) {
    case 2: return launch<T, 2>(b, rank, data, nvec, area, stream);
    case 3: return launch<T, 3>(b, rank, data, nvec, area, stream);
    case 4: return launch<T, 4>(b, rank, data, nvec, area, stream);
    case 5: return launch<T, 5>(b, rank, data, nvec, area, stream);
    case 6: return launch<T, 6>(b, rank, data, nvec, area, stream);
    case 7: return launch<T, 7>(b, rank, data, nvec, area, stream);
    case 8: return launch<T, 8>(b, rank, data, nvec, area, stream);
    default: fail(str("custom all-reduce: ", size, " ranks (2..", kCarMaxRanks, " supported)"));
  }
}

}  // namespace

size_t car_buffer_bytes(size_t max_bytes) { return kDataOffset + 2 * data_area_bytes(max_bytes); }

void* car_alloc(int device, size_t bytes) {
  RLM_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  RLM_CUDA_CHECK(cudaMalloc(&p, bytes));
  RLM_CUDA_CHECK(cudaMemset(p, 0, bytes));
  RLM_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void car_free(int device, void* buffer) {
  if (buffer == nullptr) return;
  cudaSetDevice(device);
  cudaFree(buffer);  // at teardown: errors are not actionable
}

std::vector<uint8_t> car_ipc_handle(int device, void* buffer) {
  RLM_CUDA_CHECK(cudaSetDevice(device));
  cudaIpcMemHandle_t h;
  RLM_CUDA_CHECK(cudaIpcGetMemHandle(&h, buffer));
  std::vector<uint8_t> out(sizeof(h));
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

void* car_open_ipc(int device, const std::vector<uint8_t>& handle) {
  RLM_CHECK_EQ(handle.size(), sizeof(cudaIpcMemHandle_t))
      << "custom all-reduce: a CUDA IPC handle of the wrong size";
  RLM_CUDA_CHECK(cudaSetDevice(device));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  RLM_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  return p;
}

void car_close_ipc(int device, void* mapped) {
  if (mapped == nullptr) return;
  cudaSetDevice(device);
  cudaIpcCloseMemHandle(mapped);
}

bool car_peer_access(int device, int peer_device) {
  if (device == peer_device) return true;
  int ok = 0;
  return cudaDeviceCanAccessPeer(&ok, device, peer_device) == cudaSuccess && ok != 0;
}

void car_enable_peer_access(int device, int peer_device) {
  RLM_CUDA_CHECK(cudaSetDevice(device));
  const cudaError_t st = cudaDeviceEnablePeerAccess(peer_device, 0);
  if (st == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return;
  }
  RLM_CUDA_CHECK(st);
}

bool car_fits(const void* data, int64_t numel, DType dtype, size_t max_bytes) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) return false;
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  return numel > 0 && bytes % 16 == 0 && bytes <= max_bytes && reinterpret_cast<uintptr_t>(data) % 16 == 0;
}

void car_all_reduce(int device, void* const* buffers, int rank, int size, size_t max_bytes, void* data,
                    int64_t numel, DType dtype, void* stream) {
  RLM_CHECK(size >= 2 && size <= kCarMaxRanks && rank >= 0 && rank < size)
      << "custom all-reduce: rank " << rank << " of " << size;
  RLM_CUDA_CHECK(cudaSetDevice(device));
  Buffers b{};
  for (int r = 0; r < size; ++r) b.p[r] = static_cast<char*>(buffers[r]);
  RLM_CHECK(car_fits(data, numel, dtype, max_bytes)) << "custom all-reduce: a message that does not fit";
  const int64_t nvec = numel * static_cast<int64_t>(dtype_size(dtype)) / 16;
  const auto area = static_cast<int64_t>(data_area_bytes(max_bytes));
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kF32: return launch_ranks<float>(b, rank, size, data, nvec, area, s);
    case DType::kBF16: return launch_ranks<__nv_bfloat16>(b, rank, size, data, nvec, area, s);
    case DType::kF16: return launch_ranks<__half>(b, rank, size, data, nvec, area, s);
    default: fail(str("custom all-reduce: no kernel for ", dtype_name(dtype)));
  }
}

}  // namespace rlm::cuda
