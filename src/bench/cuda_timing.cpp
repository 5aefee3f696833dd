#include "bench/cuda_timing.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <thread>
#include <vector>

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
  const int64_t n = t.numel();
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t num_chunks = (n + kChunk - 1) / kChunk;
  auto run = [&](int64_t first_chunk, int64_t stride) {
    std::vector<float> buf(static_cast<size_t>(std::min(kChunk, n)));
    for (int64_t c = first_chunk; c < num_chunks; c += stride) {
      const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
      for (int64_t i = 0; i < len; ++i) {
        uint64_t z = key + static_cast<uint64_t>(begin + i + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        buf[static_cast<size_t>(i)] = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
      }
      convert_from_f32(buf.data(), static_cast<uint8_t*>(t.data_ptr()) + begin * t.element_size(), dtype,
                       static_cast<size_t>(len));
    }
  };
  int64_t threads = num_threads > 0
                        ? num_threads
                        : std::min<int64_t>(static_cast<int64_t>(std::thread::hardware_concurrency()), 32);
  threads = std::max<int64_t>(1, std::min(threads, num_chunks));
  if (threads == 1) {
    run(0, 1);
    return t;
  }
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < threads; ++w) pool.emplace_back(run, w, threads);
  for (std::thread& th : pool) th.join();
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
