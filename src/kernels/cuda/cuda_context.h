// Per-device CUDA state shared by the ops: the stream (the legacy default stream 0 for now), a
// cuBLAS handle bound to it, a growable scratch buffer and a small buffer for index checks.
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
  // cudaStream_t (nullptr = default stream) and cublasHandle_t, as opaque pointers.
  void* stream() const { return nullptr; }
  void* cublas();
  // At least `nbytes` of device memory, valid until the next scratch() call on this device.
  void* scratch(size_t nbytes);
  // 16 bytes of device memory for flags/results of check kernels.
  void* flag_buffer();
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

 private:
  explicit CudaContext(int device) : device_(device) {}
  int device_;
  std::mutex mutex_;
  void* cublas_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  void* flag_ = nullptr;
};

// cudaSetDevice(index), checked.
void set_device(int index);

}  // namespace rlm::cuda
