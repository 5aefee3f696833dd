// Where a tensor's bytes live, and the raw memory operations on each kind of device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rlm {

class CachingAllocator;

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string to_string() const;
};

// Parses "cpu", "cuda", "cuda:1".
bool parse_device(const std::string& text, Device* out);

// True when this binary was built with CUDA support.
bool cuda_compiled();
// Number of visible CUDA devices (0 when not compiled with CUDA or no driver/device).
int cuda_device_count();

// Allocation on a device. CPU memory is 64-byte aligned (aligned_alloc). CUDA memory comes from
// the device's caching allocator (cuda_allocator): freed blocks are kept for reuse, so steady-state
// steps neither call cudaMalloc nor cudaFree (which synchronises the device).
void* device_alloc(Device device, size_t nbytes);
void device_free(Device device, void* ptr);
// Copies `nbytes` between any two devices. On return the source may be reused and, for a copy
// to the host, the destination holds the data (device-to-host waits for the stream). Host-to-device
// copies up to 1 MiB are staged through pinned memory and queued on the stream without waiting
// (ordered before any later op); larger ones wait. Device-to-device copies on one GPU are queued on
// its stream and are CUDA-graph capturable; a copy touching the host inside a capture is an error.
void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
// `rows` rows of `width` bytes, row i from src + i * src_pitch to dst + i * dst_pitch, both on
// `device` (CPU, or one GPU: cudaMemcpy2DAsync on its stream, capturable).
void device_memcpy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                      Device device);
// Queued on the device's stream for CUDA (capturable); immediate on the CPU.
void device_memset(void* dst, Device device, int value, size_t nbytes);

// The one stream every radixlm op on CUDA device `index` runs on (a cudaStream_t as an opaque
// pointer), created on first use. It is a blocking stream: work on the legacy default stream still
// orders with it, but only work on this stream can be captured into a CUDA graph.
void* cuda_stream(int index);
// The caching allocator of CUDA device `index` (created on first use, never destroyed).
CachingAllocator& cuda_allocator(int index);
// Waits for the device's stream (a no-op on the CPU).
void device_synchronize(Device device);

struct DeviceMemoryInfo {
  size_t free_bytes = 0;   // cudaMemGetInfo: free on the device now
  size_t total_bytes = 0;  // capacity of the device
};
// Free/total memory of a CUDA device (fails on the CPU).
DeviceMemoryInfo device_memory_info(Device device);

}  // namespace rlm
