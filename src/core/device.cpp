#include "core/device.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"

#ifdef RADIXLM_WITH_CUDA
#include <cuda_runtime.h>
#define RLM_CUDART_CHECK(expr)                                                             \
  do {                                                                                     \
    cudaError_t _e = (expr);                                                               \
    RLM_CHECK(_e == cudaSuccess) << #expr << ": " << cudaGetErrorString(_e);               \
  } while (0)
#endif

namespace rlm {

std::string Device::to_string() const {
  if (is_cpu()) return "cpu";
  return "cuda:" + std::to_string(index);
}

bool parse_device(const std::string& text, Device* out) {
  if (text == "cpu") {
    *out = Device::cpu();
    return true;
  }
  if (text == "cuda") {
    *out = Device::cuda(0);
    return true;
  }
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    char* end = nullptr;
    long idx = std::strtol(text.c_str() + 5, &end, 10);
    if (*end != '\0' || idx < 0) return false;
    *out = Device::cuda(static_cast<int>(idx));
    return true;
  }
  return false;
}

bool cuda_compiled() {
#ifdef RADIXLM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef RADIXLM_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

void* device_alloc(Device device, size_t nbytes) {
  if (device.is_cpu()) {
    size_t rounded = (nbytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    RLM_CHECK(p != nullptr) << "out of host memory allocating " << nbytes << " bytes";
    return p;
  }
#ifdef RADIXLM_WITH_CUDA
  void* p = nullptr;
  RLM_CUDART_CHECK(cudaSetDevice(device.index));
  RLM_CUDART_CHECK(cudaMalloc(&p, nbytes == 0 ? 1 : nbytes));
  return p;
#else
  fail("device_alloc: " + device.to_string() + " requested but radixlm was built without CUDA");
#endif
}

void device_free(Device device, void* ptr) {
  if (ptr == nullptr) return;
  if (device.is_cpu()) {
    std::free(ptr);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  cudaFree(ptr);
#endif
}

void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, nbytes);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  RLM_CUDART_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
#else
  fail("device_memcpy: CUDA device used but radixlm was built without CUDA");
#endif
}

void device_memset(void* dst, Device device, int value, size_t nbytes) {
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, value, nbytes);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  RLM_CUDART_CHECK(cudaMemset(dst, value, nbytes));
#else
  fail("device_memset: CUDA device used but radixlm was built without CUDA");
#endif
}

}  // namespace rlm
