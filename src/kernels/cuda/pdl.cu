#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "core/cuda_check.h"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/pdl.h"

namespace rlm::cuda {
namespace {

std::atomic<bool> g_pdl_enabled{true};

struct TimelineUnit {
  std::string file;
  void (*reset)();
  unsigned (*copy)(std::vector<TimelineRecord>&);
};
std::mutex g_units_mu;
std::vector<TimelineUnit>& timeline_units() {
  static std::vector<TimelineUnit> units;
  return units;
}

}  // namespace

int register_timeline_unit(const char* file, void (*reset)(),
                           unsigned (*copy)(std::vector<TimelineRecord>&)) {
  std::lock_guard<std::mutex> lock(g_units_mu);
  timeline_units().push_back({file, reset, copy});
  return static_cast<int>(timeline_units().size()) - 1;
}

bool timeline_built() {
#ifdef RADIXLM_KERNEL_TIMELINE
  return true;
#else
  return false;
#endif
}

void timeline_reset() {
  RLM_CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard<std::mutex> lock(g_units_mu);
  for (const auto& u : timeline_units()) u.reset();
}

size_t timeline_dump(const std::string& path) {
  RLM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<TimelineRecord> all;
  std::vector<std::string> files;
  {
    std::lock_guard<std::mutex> lock(g_units_mu);
    for (const auto& u : timeline_units()) {
      const size_t at = all.size();
      const unsigned made = u.copy(all);
      for (size_t i = at; i < all.size(); ++i) all[i].unit = static_cast<unsigned>(files.size());
      const size_t slash = u.file.find_last_of('/');
      files.push_back(slash == std::string::npos ? u.file : u.file.substr(slash + 1));
      if (made > kTimelineMaxRecords) {
        std::fprintf(
            stderr,
            "radixlm: kernel timeline: %s made %u block records, %u kept (the first ones): its later "
            "launches are missing from the dump\n",
            files.back().c_str(), made, kTimelineMaxRecords);
      }
    }
  }
  std::sort(all.begin(), all.end(),
            [](const TimelineRecord& a, const TimelineRecord& b) { return a.t_wait < b.t_wait; });
  std::FILE* f = std::fopen(path.c_str(), "w");
  RLM_CHECK(f != nullptr) << "timeline_dump: cannot write " << path;
  std::fprintf(f, "unit,grid,block,threads,sm,t_enter,t_wait,mark0,mark1,mark2,mark3\n");
  for (const auto& r : all) {
    std::fprintf(f, "%s,%u,%u,%u,%u,%llu,%llu,%u,%u,%u,%u\n", files[r.unit].c_str(), r.grid, r.block,
                 r.threads, r.sm, r.t_enter, r.t_wait, r.mark[0], r.mark[1], r.mark[2], r.mark[3]);
  }
  std::fclose(f);
  return all.size();
}

void set_pdl_enabled(bool enabled) { g_pdl_enabled.store(enabled, std::memory_order_relaxed); }

bool pdl_enabled() { return g_pdl_enabled.load(std::memory_order_relaxed); }

bool pdl_on_current_device() {
  if (!pdl_enabled()) return false;
  int device = 0;
  RLM_CUDA_CHECK(cudaGetDevice(&device));
  return compute_capability(device) >= 90;
}

}  // namespace rlm::cuda
