#include "kernels/cuda/pdl.h"

#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "core/cuda_check.h"

namespace rlm::cuda {
namespace {

std::atomic<bool> g_pdl_enabled{true};

}  // namespace

void set_pdl_enabled(bool enabled) { g_pdl_enabled.store(enabled, std::memory_order_relaxed); }

bool pdl_enabled() { return g_pdl_enabled.load(std::memory_order_relaxed); }

bool pdl_on_current_device() {
  if (!pdl_enabled()) return false;
  // Per device: 0 unknown, 1 without PDL, 2 with.
  static std::array<std::atomic<int>, 64> capable{};
  int device = 0;
  RLM_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(capable.size())) return false;
  int c = capable[device].load(std::memory_order_relaxed);
  if (c == 0) {
    int major = 0;
    RLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    c = major >= 9 ? 2 : 1;
    capable[device].store(c, std::memory_order_relaxed);
  }
  return c == 2;
}

}  // namespace rlm::cuda
