#include <cstring>
#include <cuda/atomic>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/custom_all_reduce.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rms_norm_row.cuh"

namespace rlm::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 64;

// The signal area at the start of every rank's buffer. start[b][r]: the call number rank r's block b
// last announced to this rank; calls: the calls (of either kernel) this rank has finished; done:
// the blocks of the call in progress that have finished it.
struct Signals {
  uint32_t start[kMaxBlocks][kCarMaxRanks];
  uint32_t calls;
  uint32_t done;
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

// This call's number on this rank (1 + the calls it finished before), the same on every rank for
// the same call: every rank makes the same calls, and each kernel's last block advances the count
// (end_call). Read after the PDL wait, when the previous call's kernel has ended. One number per
// call, not per block, so that the data area's parity alternates call by call for every byte
// whatever grid each call had (see one_shot_kernel).
__device__ __forceinline__ uint32_t begin_call(const Buffers& b, int rank) {
  __shared__ uint32_t flag_s;
  if (threadIdx.x == 0) flag_s = __ldcg(&signals(b, rank)->calls) + 1;
  __syncthreads();
  return flag_s;
}

// The block is done with call `flag`: the last block of the grid to get here advances the count.
// Every block read the count before any block got here (begin_call precedes this in each block).
__device__ __forceinline__ void end_call(const Buffers& b, int rank, uint32_t flag) {
  if (threadIdx.x != 0) return;
  Signals* s = signals(b, rank);
  if (atomicAdd(&s->done, 1u) == gridDim.x - 1) {
    s->done = 0;
    __stcg(&s->calls, flag);
  }
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
// Calls alternate between two data areas by their number, so no second meeting is needed before
// returning: a rank writes an area again two calls later, and it can only start that call after
// its blocks met the peers' in the call in between -- so after each peer's kernel of the call
// before, which read the area, had ended (stream order; a kernel passes its PDL wait only once the
// one before it has ended). The same holds for reduce_add_norm_kernel, which writes into the
// peers' areas: the two kernels share the call numbers and the areas.
template <typename T, int N>
__global__ void __launch_bounds__(kThreads)
    one_shot_kernel(Buffers b, int rank, uint4* data, int64_t nvec, int64_t area_bytes) {
  pdl_wait();
  pdl_launch_dependents();
  const uint32_t flag = begin_call(b, rank);
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
  end_call(b, rank, flag);
  timeline_mark(3);
}

// Rank `src`'s slot of rank `owner`'s data area for call `flag` (car_all_reduce_add_rms_norm: each
// rank writes its rows into its slot of every rank's area).
__device__ __forceinline__ float4* slot_of(const Buffers& b, int owner, uint32_t flag, int64_t area_bytes,
                                           int64_t slot_bytes, int src) {
  return reinterpret_cast<float4*>(b.p[owner] + kDataOffset + (flag & 1u) * area_bytes + src * slot_bytes);
}

// The all-reduce of rows f32 [rows, d] followed by fused_add_rms_norm, one block per row (block b
// takes rows b, b + grid, ...): the block writes its rows of x into slot `rank` of every rank's
// area (the peers' over NVLink / PCIe: a write, no read round trip), meets its namesakes, then
// for each row sums the slots in rank order 0..N-1 from its own area -- the one-shot kernel's
// f32 sums -- adds the residual and normalises with rms_norm_vec_kernel<kFused = true>'s block
// size and steps (rms_norm_row.cuh), so x and the residual end bit-identical to car_all_reduce
// followed by cuda::fused_add_rms_norm.
template <typename W, int N, int kVec>
__global__ void __launch_bounds__(kBlock)
    reduce_add_norm_kernel(Buffers b, int rank, float* x, float* residual, int64_t rows, int64_t d,
                           const W* weight, float eps, int64_t area_bytes, int64_t slot_bytes) {
  const int64_t d4 = d / 4;
  float4 wf[kVec];  // constant: read before the wait for the projection that writes x (PDL)
  load_row_weights(weight, d4, wf);
  pdl_wait();
  pdl_launch_dependents();
  const uint32_t flag = begin_call(b, rank);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float4* src = reinterpret_cast<const float4*>(x + row * d);
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const int64_t k = row_slot(u);
      if (k < d4) {
        const float4 v = src[k];
#pragma unroll
        for (int r = 0; r < N; ++r) slot_of(b, r, flag, area_bytes, slot_bytes, rank)[row * d4 + k] = v;
      }
    }
  }
  timeline_mark(0);
  meet<N>(b, rank, flag);
  timeline_mark(1);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float4* xr = reinterpret_cast<float4*>(x + row * d);
    float4* rr = reinterpret_cast<float4*>(residual + row * d);
    float4 v[kVec];
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const int64_t k = row_slot(u);
      if (k < d4) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int r = 0; r < N; ++r) {
          const float4 p = __ldcg(slot_of(b, rank, flag, area_bytes, slot_bytes, r) + row * d4 + k);
          acc = make_float4(acc.x + p.x, acc.y + p.y, acc.z + p.z, acc.w + p.w);
        }
        const float4 res = rr[k];
        v[u] = make_float4(res.x + acc.x, res.y + acc.y, res.z + acc.z, res.w + acc.w);
      }
    }
    const float inv = row_inv_rms<true>(v, d4, d, eps, rr);
    scale_row(v, wf, inv, d4, xr);
  }
  end_call(b, rank, flag);
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

template <typename W, int N>
void launch_norm(const Buffers& b, int rank, float* x, float* residual, int64_t rows, int64_t d,
                 const W* weight, float eps, int64_t area, int64_t slot, cudaStream_t stream) {
  const int blocks = static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks);
  const int64_t per_thread = row_slots(d);
  auto go = [&](auto kernel) {
    launch_pdl(kernel, dim3(blocks), dim3(kBlock), 0, stream, b, rank, x, residual, rows, d, weight, eps,
               area, slot);
  };
  if (per_thread <= 1) return go(reduce_add_norm_kernel<W, N, 1>);
  if (per_thread <= 2) return go(reduce_add_norm_kernel<W, N, 2>);
  if (per_thread <= 4) return go(reduce_add_norm_kernel<W, N, 4>);
  go(reduce_add_norm_kernel<W, N, kRowMaxVec>);
}

template <typename W>
void launch_norm_ranks(const Buffers& b, int rank, int size, float* x, float* residual, int64_t rows,
                       int64_t d, const W* weight, float eps, int64_t area, int64_t slot,
                       cudaStream_t stream) {
  switch (size) {
    case 2: return launch_norm<W, 2>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    case 3: return launch_norm<W, 3>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    case 4: return launch_norm<W, 4>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    case 5: return launch_norm<W, 5>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    case 6: return launch_norm<W, 6>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    case 7: return launch_norm<W, 7>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    case 8: return launch_norm<W, 8>(b, rank, x, residual, rows, d, weight, eps, area, slot, stream);
    default: fail(str("custom all-reduce: ", size, " ranks (2..", kCarMaxRanks, " supported)"));
  }
}

// A rank's slot of a data area in car_all_reduce_add_rms_norm.
int64_t norm_slot_bytes(size_t max_bytes, int size) {
  return static_cast<int64_t>(data_area_bytes(max_bytes)) / size / 16 * 16;
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

bool car_norm_fits(const void* x, const void* residual, int64_t rows, int64_t d, int size, size_t max_bytes) {
  if (rows <= 0 || d <= 0 || !row_width_fits(d) || size < 2 || size > kCarMaxRanks) return false;
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(residual) % 16 != 0)
    return false;
  return rows * d * static_cast<int64_t>(sizeof(float)) <= norm_slot_bytes(max_bytes, size);
}

void car_all_reduce_add_rms_norm(int device, void* const* buffers, int rank, int size, size_t max_bytes,
                                 float* x, float* residual, int64_t rows, int64_t d, const void* weight,
                                 DType weight_dtype, float eps, void* stream) {
  RLM_CHECK(size >= 2 && size <= kCarMaxRanks && rank >= 0 && rank < size)
      << "custom all-reduce: rank " << rank << " of " << size;
  RLM_CHECK(car_norm_fits(x, residual, rows, d, size, max_bytes))
      << "custom all-reduce + RMSNorm: [" << rows << ", " << d << "] rows that do not fit";
  RLM_CUDA_CHECK(cudaSetDevice(device));
  Buffers b{};
  for (int r = 0; r < size; ++r) b.p[r] = static_cast<char*>(buffers[r]);
  const auto area = static_cast<int64_t>(data_area_bytes(max_bytes));
  const int64_t slot = norm_slot_bytes(max_bytes, size);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch_float(weight_dtype, [&](auto w) {
    using W = decltype(w);
    launch_norm_ranks<W>(b, rank, size, x, residual, rows, d, static_cast<const W*>(weight), eps, area, slot,
                         s);
  });
}

}  // namespace rlm::cuda
