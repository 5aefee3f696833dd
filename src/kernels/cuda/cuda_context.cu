#include "kernels/cuda/cuda_context.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <memory>

#include "core/caching_allocator.h"
#include "core/cuda_check.h"
#include "core/device.h"

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

void* CudaContext::stream() const { return cuda_stream(device_); }

void* CudaContext::cublas() {
  if (cublas_ == nullptr) {
    set_device(device_);
    cublasHandle_t h = nullptr;
    RLM_CUBLAS_CHECK(cublasCreate(&h));
    RLM_CUBLAS_CHECK(cublasSetStream(h, static_cast<cudaStream_t>(stream())));
    // A fixed workspace: without one, cuBLAS allocates per stream on demand, which a CUDA-graph
    // capture must not do. Raw cudaMalloc, never freed: graphs may reference it for ever.
    RLM_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
    RLM_CUBLAS_CHECK(cublasSetWorkspace(h, cublas_workspace_, kCublasWorkspaceBytes));
    // Default math: no TF32 (the GEMMs pass CUBLAS_COMPUTE_32F explicitly).
    RLM_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    cublas_ = h;
  }
  return cublas_;
}

void CudaContext::drop_scratch() {
  // Stream-ordered reuse: the kernels queued on the old scratch run before any later user of it.
  if (scratch_ != nullptr) cuda_allocator(device_).free(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
}

void* CudaContext::scratch(size_t nbytes) {
  if (nbytes > scratch_bytes_) {
    drop_scratch();
    const size_t want = nbytes + nbytes / 4 + 256;
    scratch_ = cuda_allocator(device_).allocate(want);
    scratch_bytes_ = want;
  }
  return scratch_;
}

void CudaContext::on_capture_begin() {
  auto l = lock();
  drop_scratch();
}

void CudaContext::on_capture_end() {
  auto l = lock();
  drop_scratch();
}

void* CudaContext::flag_buffer() {
  if (flag_ == nullptr) {
    set_device(device_);
    RLM_CUDA_CHECK(cudaMalloc(&flag_, 16));
  }
  return flag_;
}

}  // namespace rlm::cuda
