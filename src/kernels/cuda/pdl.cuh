// Device side and launcher of programmatic dependent launch (kernels/cuda/pdl.h). A kernel launched
// with launch_pdl must call pdl_wait() in every block before it reads anything an earlier kernel
// of the stream writes, and before it writes anything an earlier kernel reads (only constant data
// — weights — may be touched before); pdl_launch_dependents() after the wait lets the next
// PDL-launched kernel's blocks be scheduled. Both are no-ops on older GPUs and for plain launches.
// Included only by .cu files.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_check.h"
#include "kernels/cuda/pdl.h"

namespace rlm::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
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
