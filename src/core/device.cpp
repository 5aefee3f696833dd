#include "core/device.h"

#include <cstdlib>
#include <cstring>

#include "core/caching_allocator.h"
#include "core/check.h"

#ifdef RADIXLM_WITH_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
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

#ifdef RADIXLM_WITH_CUDA
namespace {

constexpr int kMaxCudaDevices = 64;

void check_index(int index) {
  RLM_CHECK(index >= 0 && index < kMaxCudaDevices) << "CUDA device index " << index << " out of range";
}

// cudaMalloc/cudaFree on one device.
class CudaRawAllocator : public RawAllocator {
 public:
  explicit CudaRawAllocator(int device) : device_(device) {}
  void* raw_alloc(size_t nbytes) override {
    RLM_CUDART_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    // A CUDA-graph capture counts cudaMalloc as unsafe (it is not a stream operation). New blocks of
    // a graph's private pool are made during capture on purpose (the graph keeps them for ever), so
    // the call runs in relaxed mode, as PyTorch's allocator does.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    RLM_CUDART_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t e = cudaMalloc(&p, nbytes);
    RLM_CUDART_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error so later calls do not report it
      return nullptr;
    }
    RLM_CHECK(e == cudaSuccess) << "cudaMalloc(" << nbytes << "): " << cudaGetErrorString(e);
    return p;
  }
  void raw_free(void* ptr) override {
    (void)cudaSetDevice(device_);
    (void)cudaFree(ptr);
  }

 private:
  int device_;
};

// Host-to-device uploads without a stream sync (a pageable cudaMemcpyAsync waits for the stream):
// the bytes are copied into one of kSlots pinned staging slots and uploaded from there; a slot is
// reused once the copy that last read it has completed (its event), which for a ring of 16 is
// almost always long ago.
class UploadRing {
 public:
  static constexpr int kSlots = 16;
  static constexpr size_t kSlotBytes = size_t{1} << 20;

  void upload(void* dst, const void* src, size_t nbytes, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    if (s.host == nullptr) {
      RLM_CUDART_CHECK(cudaMallocHost(&s.host, kSlotBytes));
      RLM_CUDART_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    } else {
      RLM_CUDART_CHECK(cudaEventSynchronize(s.done));
    }
    std::memcpy(s.host, src, nbytes);
    RLM_CUDART_CHECK(cudaMemcpyAsync(dst, s.host, nbytes, cudaMemcpyHostToDevice, stream));
    RLM_CUDART_CHECK(cudaEventRecord(s.done, stream));
  }

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::mutex mutex_;
  std::array<Slot, kSlots> slots_{};
  int next_ = 0;
};

UploadRing& upload_ring(int index) {
  static std::array<std::atomic<UploadRing*>, kMaxCudaDevices> rings{};
  static std::mutex mutex;
  UploadRing* r = rings[index].load(std::memory_order_acquire);
  if (r != nullptr) return *r;
  std::lock_guard<std::mutex> lock(mutex);
  r = rings[index].load(std::memory_order_relaxed);
  if (r == nullptr) {
    r = new UploadRing();  // never destroyed, like the allocators
    rings[index].store(r, std::memory_order_release);
  }
  return *r;
}

}  // namespace

void* cuda_stream(int index) {
  check_index(index);
  static std::array<std::atomic<void*>, kMaxCudaDevices> streams{};
  static std::mutex mutex;
  void* s = streams[index].load(std::memory_order_acquire);
  if (s != nullptr) return s;
  std::lock_guard<std::mutex> lock(mutex);
  s = streams[index].load(std::memory_order_relaxed);
  if (s == nullptr) {
    int prev = 0;
    RLM_CUDART_CHECK(cudaGetDevice(&prev));
    RLM_CUDART_CHECK(cudaSetDevice(index));
    cudaStream_t created = nullptr;
    RLM_CUDART_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamDefault));
    RLM_CUDART_CHECK(cudaSetDevice(prev));
    s = created;
    streams[index].store(s, std::memory_order_release);
  }
  return s;
}

CachingAllocator& cuda_allocator(int index) {
  check_index(index);
  static std::array<std::atomic<CachingAllocator*>, kMaxCudaDevices> allocators{};
  static std::mutex mutex;
  CachingAllocator* a = allocators[index].load(std::memory_order_acquire);
  if (a != nullptr) return *a;
  std::lock_guard<std::mutex> lock(mutex);
  a = allocators[index].load(std::memory_order_relaxed);
  if (a == nullptr) {
    // Never destroyed: tensors in static storage may outlive any destruction order.
    a = new CachingAllocator(std::make_unique<CudaRawAllocator>(index));
    allocators[index].store(a, std::memory_order_release);
  }
  return *a;
}
#else
void* cuda_stream(int index) { fail("cuda_stream: radixlm was built without CUDA"); }
CachingAllocator& cuda_allocator(int index) { fail("cuda_allocator: radixlm was built without CUDA"); }
#endif

void device_synchronize(Device device) {
  if (device.is_cpu()) return;
#ifdef RADIXLM_WITH_CUDA
  RLM_CUDART_CHECK(cudaSetDevice(device.index));
  RLM_CUDART_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(cuda_stream(device.index))));
#endif
}

DeviceMemoryInfo device_memory_info(Device device) {
  RLM_CHECK(device.is_cuda()) << "device_memory_info needs a CUDA device, got " << device.to_string();
#ifdef RADIXLM_WITH_CUDA
  RLM_CUDART_CHECK(cudaSetDevice(device.index));
  DeviceMemoryInfo info;
  RLM_CUDART_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
#else
  fail("device_memory_info: radixlm was built without CUDA");
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
  return cuda_allocator(device.index).allocate(nbytes);
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
  cuda_allocator(device.index).free(ptr);
#endif
}

void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, nbytes);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
    RLM_CUDART_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));  // across GPUs: rare, synchronous
    return;
  }
  const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
  RLM_CUDART_CHECK(cudaSetDevice(index));  // the stream belongs to that device (any host thread)
  const auto stream = static_cast<cudaStream_t>(cuda_stream(index));
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    RLM_CUDART_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));  // capturable
    return;
  }
  // A copy from or to host memory cannot be part of a CUDA graph: fail loudly instead of capturing
  // a copy of a staging buffer (or invalidating the capture with a sync).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RLM_CUDART_CHECK(cudaStreamIsCapturing(stream, &capture));
  RLM_CHECK(capture == cudaStreamCaptureStatusNone)
      << "device_memcpy between host and " << (dst_device.is_cuda() ? dst_device : src_device).to_string()
      << " while a CUDA graph is being captured";
  if (src_device.is_cpu() && nbytes <= UploadRing::kSlotBytes) {
    upload_ring(index).upload(dst, src, nbytes, stream);  // no sync: the source is staged
    return;
  }
  RLM_CUDART_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  RLM_CUDART_CHECK(cudaStreamSynchronize(stream));
#else
  fail("device_memcpy: CUDA device used but radixlm was built without CUDA");
#endif
}

void device_memcpy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                      Device device) {
  if (width == 0 || rows == 0) return;
  if (device.is_cpu()) {
    for (size_t i = 0; i < rows; ++i) {
      std::memmove(static_cast<char*>(dst) + i * dst_pitch, static_cast<const char*>(src) + i * src_pitch, width);
    }
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  RLM_CUDART_CHECK(cudaSetDevice(device.index));
  RLM_CUDART_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice,
                                     static_cast<cudaStream_t>(cuda_stream(device.index))));
#else
  fail("device_memcpy_2d: CUDA device used but radixlm was built without CUDA");
#endif
}

void device_memset(void* dst, Device device, int value, size_t nbytes) {
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    std::memset(dst, value, nbytes);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  RLM_CUDART_CHECK(cudaSetDevice(device.index));
  RLM_CUDART_CHECK(cudaMemsetAsync(dst, value, nbytes, static_cast<cudaStream_t>(cuda_stream(device.index))));
#else
  fail("device_memset: CUDA device used but radixlm was built without CUDA");
#endif
}

}  // namespace rlm
