// quant_linear per weight shape of SmolLM2-135M-Instruct.Q4_K_M.gguf (the types llama-quantize
// picked, tensor counts from the gguf package), on random blocks: best of R calls, thread CPU time
// with one thread (robust on a shared machine), wall time with more; prints GMAC/s per shape and
// the 30 layers' total for one step of m rows.
//
// Built with the project (CMake target quant_linear_bench, in the build directory):
//   build-cpu/quant_linear_bench M [THREADS] [REPS] [LM_HEAD_ROWS] [TYPE]
// M = 512 is a 512-token prefill (LM_HEAD_ROWS 1, the default), M = 32 a 32-sequence decode step
// (LM_HEAD_ROWS 32). TYPE (e.g. Q4_1) replaces the type of every matrix but the lm_head.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <vector>

#include "formats/gguf_dequant.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace {

double seconds(bool thread_cpu) {
  timespec t;
  clock_gettime(thread_cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct WeightShape {
  const char* name;
  rlm::DType dtype;
  int64_t n, k;   // [n, k] weight
  int64_t count;  // tensors of this type and shape in the file
  bool lm_head;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace rlm;
  const int64_t m = argc > 1 ? std::atoll(argv[1]) : 1;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  const int64_t lm_head_rows = argc > 4 ? std::atoll(argv[4]) : 1;
  std::optional<DType> as_type;
  if (argc > 5) {
    StatusOr<DType> t = parse_dtype(argv[5]);
    if (!t.is_ok() || !is_quantized(t.value())) {
      std::fprintf(stderr, "%s is not a block-quantized type\n", argv[5]);
      return 2;
    }
    as_type = t.value();
  }
  cpu::set_num_threads(threads);
  const WeightShape shapes[] = {
      {"attn_q/output", DType::kQ5_0, 576, 576, 60, false}, {"attn_k", DType::kQ5_0, 192, 576, 30, false},
      {"attn_v", DType::kQ5_0, 192, 576, 16, false},        {"attn_v", DType::kQ8_0, 192, 576, 14, false},
      {"ffn_gate/up", DType::kQ5_0, 1536, 576, 60, false},  {"ffn_down", DType::kQ4_K, 576, 1536, 16, false},
      {"ffn_down", DType::kQ6_K, 576, 1536, 14, false},     {"lm_head", DType::kQ8_0, 49152, 576, 1, true},
  };
  double total = 0;
  for (WeightShape s : shapes) {
    if (as_type && !s.lm_head) s.dtype = *as_type;
    const size_t row_bytes = dtype_nbytes(s.dtype, s.k);
    std::vector<uint8_t> w(row_bytes * static_cast<size_t>(s.n));
    fill_random_blocks(s.dtype, w.data(), s.n * (s.k / dtype_block_size(s.dtype)), 1, 0.5f);
    const int64_t rows = s.lm_head ? lm_head_rows : m;
    std::vector<float> x(static_cast<size_t>(rows * s.k)), out(static_cast<size_t>(rows * s.n));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const double t0 = seconds(threads == 1);
      cpu::quant_linear(x.data(), rows, s.k, s.k, w.data(), s.dtype, s.n, row_bytes, nullptr, DType::kF32,
                        out.data(), s.n);
      best = std::min(best, seconds(threads == 1) - t0);
    }
    std::printf("%-5s %-16s m=%4lld %9.3f ms x%-3lld %9.2f ms %6.1f GMAC/s\n", dtype_name(s.dtype), s.name,
                static_cast<long long>(rows), best * 1e3, static_cast<long long>(s.count),
                best * 1e3 * static_cast<double>(s.count),
                1e-9 * static_cast<double>(rows * s.n * s.k) / best);
    total += best * static_cast<double>(s.count);
  }
  std::printf("total m=%lld threads=%d: %.2f ms\n", static_cast<long long>(m), threads, total * 1e3);
}
