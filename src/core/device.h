// Where a tensor's bytes live, and the raw memory operations on each kind of device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rlm {

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

// Raw allocation on a device. CPU memory is 64-byte aligned.
void* device_alloc(Device device, size_t nbytes);
void device_free(Device device, void* ptr);
// Copies `nbytes` between any two devices (synchronous with respect to the host).
void device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);
void device_memset(void* dst, Device device, int value, size_t nbytes);

}  // namespace rlm
