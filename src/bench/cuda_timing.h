// What the CUDA kernel benchmarks (bench attention, bench gemv) share: CUDA error checks, median
// event timing, random device tensors, and writing/printing the JSON report.
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/tensor.h"

#ifdef RADIXLM_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>
#endif

namespace rlm::bench {

// Writes `report` to `json_path` when set, then prints it on one line. Returns the exit code: 1
// (with a message naming `command`) when the file cannot be written, else 0.
int finish_report(const nlohmann::json& report, const std::string& json_path, const char* command);

// A host tensor of `shape` with uniform [-1, 1) values rounded to `dtype` (fill_uniform_counter,
// core/random_fill.h: the same values for any num_threads; 0 = all cores). A gigabyte FP8 cache
// drawn element by element from one mt19937 took ~20 s, most of a `bench attention` run.
Tensor random_host(uint64_t key, const Shape& shape, DType dtype, int num_threads = 0);

#ifdef RADIXLM_WITH_CUDA

// rlm::Error naming `what` unless e == cudaSuccess.
void cuda_ok(cudaError_t e, const char* what);

// Opens (true) or closes (false) the profiler's capture range (cudaProfilerStart/Stop): Nsight
// Compute with --profile-from-start off records only kernels inside it; without a profiler
// attached, a no-op.
void profiler_range(bool open);

// random_host's tensor on the GPU, its key drawn from rng.
Tensor random_gpu(std::mt19937& rng, const Shape& shape, DType dtype);

// Median seconds of fn() over `iters` runs, each bracketed by events recorded on `stream`
// (nullptr: the legacy default stream), after `warmup` runs and a device synchronisation.
template <typename F>
double median_seconds(int iters, int warmup, cudaStream_t stream, F&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  cuda_ok(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start{}, stop{};
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord");
    fn();
    cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    t.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

#endif

}  // namespace rlm::bench
