// Per-device CUDA state shared by the ops: the device's stream (core's cuda_stream), a cuBLAS handle
// bound to it with a preallocated workspace (so cuBLAS never allocates inside a CUDA-graph capture),
// a growable scratch buffer from the caching allocator, and a small buffer for index checks.
// Ops that use the scratch or the flag buffer hold lock() for the whole call, so concurrent host
// threads on one device do not share them. Host-only header (no CUDA types leak to callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace rlm::cuda {

class CudaContext {
 public:
  // The context of device `index` (created on first use; cudaSetDevice(index) is called).
  static CudaContext& get(int index);

  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  // cudaStream_t and cublasHandle_t, as opaque pointers.
  void* stream() const;
  void* cublas();
  // At least `nbytes` of device memory, valid until the next scratch() call on this device. It
  // comes from the caching allocator, so inside a CUDA-graph capture it is graph-pool memory.
  void* scratch(size_t nbytes);
  // 16 bytes of device memory for flags/results of check kernels (never freed).
  void* flag_buffer();
  // Capture boundaries (CudaGraph calls these): the scratch is dropped so the captured ops get a
  // scratch from the graph pool, and the eager ops after the capture one from the general pool.
  void on_capture_begin();
  void on_capture_end();
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

  // cuBLAS workspace size (NVIDIA's recommendation for Hopper).
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

 private:
  explicit CudaContext(int device) : device_(device) {}
  void drop_scratch();
  int device_;
  std::mutex mutex_;
  void* cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* flag_ = nullptr;
};

// cudaSetDevice(index), checked.
void set_device(int index);

}  // namespace rlm::cuda
