#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "core/cuda_check.h"
#include "kernels/cuda/device_facts.h"

namespace rlm::cuda {

int resident_blocks_per_sm(int device, const void* kernel, int threads, size_t smem) {
  using Key = std::tuple<int, const void*, int, size_t>;
  static std::mutex mu;
  static std::map<Key, int> known;
  const Key key{device, kernel, threads, smem};
  {
    std::lock_guard<std::mutex> g(mu);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  int per_sm = 0;
  RLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  std::lock_guard<std::mutex> g(mu);
  known.emplace(key, per_sm);
  return per_sm;
}

namespace {

// attribute(device), asked once per device and remembered in `known` (0: not asked yet).
template <typename Ask>
int remembered(std::array<std::atomic<int>, 64>& known, int device, Ask ask) {
  RLM_CHECK(device >= 0 && device < static_cast<int>(known.size()))
      << "CUDA device index " << device << " out of range";
  int v = known[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = ask();
    known[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

int attribute(cudaDeviceAttr attr, int device) {
  int v = 0;
  RLM_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, device));
  return v;
}

}  // namespace

int multiprocessor_count(int device) {
  static std::array<std::atomic<int>, 64> known{};
  return remembered(known, device, [&] { return attribute(cudaDevAttrMultiProcessorCount, device); });
}

int compute_capability(int device) {
  static std::array<std::atomic<int>, 64> known{};
  return remembered(known, device, [&] {
    return attribute(cudaDevAttrComputeCapabilityMajor, device) * 10 +
           attribute(cudaDevAttrComputeCapabilityMinor, device);
  });
}

int shared_memory_optin(int device) {
  static std::array<std::atomic<int>, 64> known{};
  return remembered(known, device,
                    [&] { return attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device); });
}

}  // namespace rlm::cuda
