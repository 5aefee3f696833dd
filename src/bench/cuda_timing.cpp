#include "bench/cuda_timing.h"

#include <cstdint>
#include <cstdio>
#include <fstream>

#include "core/random_fill.h"

#ifdef RADIXLM_WITH_CUDA
#include <cuda_profiler_api.h>
#endif

namespace rlm::bench {

int finish_report(const nlohmann::json& report, const std::string& json_path, const char* command) {
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << report.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "radixlm %s: cannot write %s\n", command, json_path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", json_path.c_str());
  }
  std::printf("%s\n", report.dump().c_str());
  return 0;
}

Tensor random_host(uint64_t key, const Shape& shape, DType dtype, int num_threads) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform_counter(key, 1.0f, dtype, t.data_ptr(), t.numel(), num_threads);
  return t;
}

#ifdef RADIXLM_WITH_CUDA

void cuda_ok(cudaError_t e, const char* what) {
  RLM_CHECK(e == cudaSuccess) << "radixlm bench: " << what << ": " << cudaGetErrorString(e);
}

void profiler_range(bool open) {
  cuda_ok(cudaDeviceSynchronize(), "profiler range");
  cuda_ok(open ? cudaProfilerStart() : cudaProfilerStop(), open ? "cudaProfilerStart" : "cudaProfilerStop");
}

Tensor random_gpu(std::mt19937& rng, const Shape& shape, DType dtype) {
  const uint64_t key = (static_cast<uint64_t>(rng()) << 32) ^ rng();
  return random_host(key, shape, dtype).to(Device::cuda(0));
}

#endif

}  // namespace rlm::bench
