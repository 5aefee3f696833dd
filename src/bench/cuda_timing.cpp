#include "bench/cuda_timing.h"

#include <cstdio>
#include <fstream>

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

#ifdef RADIXLM_WITH_CUDA

void cuda_ok(cudaError_t e, const char* what) {
  RLM_CHECK(e == cudaSuccess) << "radixlm bench: " << what << ": " << cudaGetErrorString(e);
}

void profiler_range(bool open) {
  cuda_ok(cudaDeviceSynchronize(), "profiler range");
  cuda_ok(open ? cudaProfilerStart() : cudaProfilerStop(), open ? "cudaProfilerStart" : "cudaProfilerStop");
}

Tensor random_gpu(std::mt19937& rng, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return (dtype == DType::kF32 ? t : t.to(dtype)).to(Device::cuda(0));
}

#endif

}  // namespace rlm::bench
