#include "kernels/cuda/cuda_context.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <memory>

#include "core/cuda_check.h"

namespace rlm::cuda {
namespace {
constexpr int kMaxDevices = 64;
}  // namespace

void set_device(int index) { RLM_CUDA_CHECK(cudaSetDevice(index)); }

CudaContext& CudaContext::get(int index) {
  RLM_CHECK(index >= 0 && index < kMaxDevices) << "CUDA device index " << index << " out of range";
  static std::array<std::unique_ptr<CudaContext>, kMaxDevices> contexts;
  static std::mutex contexts_mutex;
  set_device(index);
  std::lock_guard<std::mutex> lock(contexts_mutex);
  if (!contexts[index]) contexts[index].reset(new CudaContext(index));
  return *contexts[index];
}

void* CudaContext::cublas() {
  if (cublas_ == nullptr) {
    set_device(device_);
    cublasHandle_t h = nullptr;
    RLM_CUBLAS_CHECK(cublasCreate(&h));
    RLM_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(stream())));
    // Default math: no TF32 (the GEMMs pass CUBLAS_COMPUTE_32F explicitly).
    RLM_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    cublas_ = h;
  }
  return cublas_;
}

void* CudaContext::scratch(size_t nbytes) {
  if (nbytes > scratch_bytes_) {
    set_device(device_);
    if (scratch_ != nullptr) {
      RLM_CUDA_CHECK(cudaDeviceSynchronize());  // earlier kernels may still read the old buffer
      RLM_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    const size_t want = nbytes + nbytes / 4 + 256;
    RLM_CUDA_CHECK(cudaMalloc(&scratch_, want));
    scratch_bytes_ = want;
  }
  return scratch_;
}

void* CudaContext::flag_buffer() {
  if (flag_ == nullptr) {
    set_device(device_);
    RLM_CUDA_CHECK(cudaMalloc(&flag_, 16));
  }
  return flag_;
}

}  // namespace rlm::cuda
