#include "core/random_fill.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace rlm {

void fill_uniform_counter(uint64_t key, float scale, DType dtype, void* dst, int64_t n, int num_threads) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t num_chunks = (n + kChunk - 1) / kChunk;
  const size_t elem = dtype_size(dtype);
  auto run = [&](int64_t first_chunk, int64_t stride) {
    std::vector<float> buf(static_cast<size_t>(std::min(kChunk, n)));
    for (int64_t c = first_chunk; c < num_chunks; c += stride) {
      const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
      for (int64_t i = 0; i < len; ++i) {
        const uint64_t r = mix64(key + static_cast<uint64_t>(begin + i + 1) * kGolden);
        const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
        buf[static_cast<size_t>(i)] = (2.0f * u - 1.0f) * scale;
      }
      convert_from_f32(buf.data(), static_cast<uint8_t*>(dst) + static_cast<size_t>(begin) * elem, dtype,
                       static_cast<size_t>(len));
    }
  };
  int64_t threads = num_threads > 0
                        ? num_threads
                        : std::min<int64_t>({num_chunks / 16,
                                             static_cast<int64_t>(std::thread::hardware_concurrency()), 32});
  threads = std::max<int64_t>(1, std::min(threads, num_chunks));
  if (threads == 1) {
    run(0, 1);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t w = 0; w < threads; ++w) pool.emplace_back(run, w, threads);
  for (std::thread& th : pool) th.join();
}

}  // namespace rlm
