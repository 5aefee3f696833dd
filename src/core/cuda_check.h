// Checks for CUDA runtime and cuBLAS calls: every call goes through RLM_CUDA_CHECK /
// RLM_CUBLAS_CHECK, which throw rlm::Error with the expression, the error name and file:line.
// RLM_CUDA_CHECK_LAUNCH() follows every kernel launch (cudaGetLastError, which does not sync);
// define RADIXLM_CUDA_SYNC_CHECKS to also synchronise after each launch while debugging.
// Only include this from code built with RADIXLM_WITH_CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/check.h"

#define RLM_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    const cudaError_t rlm_cuda_err_ = (expr);                                                    \
    if (rlm_cuda_err_ != cudaSuccess) {                                                          \
      ::rlm::fail(::rlm::str(__FILE__, ":", __LINE__, ": CUDA call failed: ", #expr, ": ",       \
                             cudaGetErrorName(rlm_cuda_err_), " (", cudaGetErrorString(rlm_cuda_err_), \
                             ")"));                                                              \
    }                                                                                            \
  } while (0)

#define RLM_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                           \
    const cublasStatus_t rlm_cublas_st_ = (expr);                                                \
    if (rlm_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                               \
      ::rlm::fail(::rlm::str(__FILE__, ":", __LINE__, ": cuBLAS call failed: ", #expr, ": ",     \
                             cublasGetStatusName(rlm_cublas_st_), " (",                          \
                             cublasGetStatusString(rlm_cublas_st_), ")"));                       \
    }                                                                                            \
  } while (0)

#ifdef RADIXLM_CUDA_SYNC_CHECKS
#define RLM_CUDA_CHECK_LAUNCH()                    \
  do {                                             \
    RLM_CUDA_CHECK(cudaGetLastError());            \
    RLM_CUDA_CHECK(cudaDeviceSynchronize());       \
  } while (0)
#else
#define RLM_CUDA_CHECK_LAUNCH() RLM_CUDA_CHECK(cudaGetLastError())
#endif
