// Device side and launcher of programmatic dependent launch (kernels/cuda/pdl.h). A kernel launched
// with launch_pdl may start while the kernel before it still runs, so it must call pdl_wait() in
// every block before it reads anything that kernel may still write -- or, where that kernel calls
// pdl_launch_dependents() before its own wait (the FP8 activation quantizations), anything the one
// before that may still write -- and before it writes anything. Before the wait it reads only
// finished data: weights, and what earlier steps or kernels further back wrote (decode attention's
// page tables and older keys, docs/design/attention_cuda.md). pdl_launch_dependents() lets the next
// PDL-launched kernel's blocks be scheduled. Both are no-ops on older GPUs and for plain launches.
// Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "kernels/cuda/pdl.h"

namespace rlm::cuda {

#ifdef RADIXLM_KERNEL_TIMELINE
// The kernel timeline (a profiling build: cmake -DRADIXLM_KERNEL_TIMELINE=ON; kernels/cuda/pdl.h):
// thread 0 of every block of every kernel that calls pdl_wait() records the global timer before
// and after the wait, its grid, block index and SM, and up to 4 marks (timeline_mark) later in the
// kernel. The records of each translation unit live in its own device arrays (no relocatable
// device code), which register themselves with pdl.cu for timeline_reset / timeline_dump.
namespace timeline {
namespace {
__device__ TimelineRecord g_records[kTimelineMaxRecords];
__device__ unsigned g_count;

void reset_tu() {
  const unsigned zero = 0;
  RLM_CUDA_CHECK(cudaMemcpyToSymbol(g_count, &zero, sizeof(zero)));
}
unsigned copy_tu(std::vector<TimelineRecord>& out) {
  unsigned made = 0;
  RLM_CUDA_CHECK(cudaMemcpyFromSymbol(&made, g_count, sizeof(made)));
  const unsigned n = made < kTimelineMaxRecords ? made : kTimelineMaxRecords;
  const size_t at = out.size();
  out.resize(at + n);
  if (n > 0) RLM_CUDA_CHECK(cudaMemcpyFromSymbol(out.data() + at, g_records, n * sizeof(TimelineRecord)));
  return made;
}
[[maybe_unused]] const int g_unit = register_timeline_unit(__BASE_FILE__, &reset_tu, &copy_tu);

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned& slot() {
  __shared__ unsigned s_slot;
  return s_slot;
}
}  // namespace
}  // namespace timeline

// Mark k (0..3) of this block: ns since its wait ended (thread 0 only; after pdl_wait).
__device__ __forceinline__ void timeline_mark(int k) {
  if (threadIdx.x + threadIdx.y + threadIdx.z != 0) return;
  const unsigned i = timeline::slot();
  if (i >= kTimelineMaxRecords) return;
  TimelineRecord& r = timeline::g_records[i];
  r.mark[k] = static_cast<unsigned>(timeline::now() - r.t_wait);
}
#else
__device__ __forceinline__ void timeline_mark(int) {}
#endif

__device__ __forceinline__ void pdl_wait() {
#ifdef RADIXLM_KERNEL_TIMELINE
  const bool first = threadIdx.x + threadIdx.y + threadIdx.z == 0;
  unsigned long long t0 = 0;
  unsigned i = 0;
  if (first) {  // the slot is taken before the wait, where the block idles anyway
    t0 = timeline::now();
    i = atomicAdd(&timeline::g_count, 1u);
    timeline::slot() = i;
  }
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef RADIXLM_KERNEL_TIMELINE
  if (first && i < kTimelineMaxRecords) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    TimelineRecord& r = timeline::g_records[i];
    r.t_enter = t0;
    r.t_wait = timeline::now();
    r.grid = gridDim.x * gridDim.y * gridDim.z;
    r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    r.threads = blockDim.x * blockDim.y * blockDim.z;
    r.sm = sm;
    for (int k = 0; k < 4; ++k) r.mark[k] = 0;
  }
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
// when pdl_on_current_device(). Checked as RLM_CUDA_CHECK_LAUNCH checks plain launches.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  if (pdl_on_current_device()) {
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  RLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
  RLM_CUDA_CHECK_LAUNCH();  // synchronizes under RADIXLM_CUDA_SYNC_CHECKS
}

}  // namespace rlm::cuda
