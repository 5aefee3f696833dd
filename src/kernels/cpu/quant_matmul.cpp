#include "kernels/cpu/quant_matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {

namespace {

constexpr int64_t kWeightTile = 16;  // weight rows per kernel call: stay in L1 while activation tiles pass
constexpr int64_t kActPass = 64;     // activation rows per pass over a weight chunk: stay in L2
// An unpacked weight tile (batches) stays in L1 beside the activations.
constexpr int64_t kUnpackedTileBytes = 16 << 10;

}  // namespace

void add_bias_rows(const void* bias, DType bias_dtype, int64_t m, int64_t n, float* out, int64_t ldo) {
  std::vector<float> b(static_cast<size_t>(n));
  convert_to_f32(bias, bias_dtype, b.data(), b.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * ldo + j] += b[j];
  }
}

void quant_linear(const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight, DType weight_dtype,
                  int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype, float* out, int64_t ldo,
                  CpuIsa isa) {
  RLM_CHECK(is_quantized(weight_dtype)) << "quant_linear: weight dtype " << dtype_name(weight_dtype);
  RLM_CHECK(cpu_supports(isa)) << "quant_linear: this CPU does not run " << cpu_isa_name(isa);
  RLM_CHECK(k % dtype_block_size(weight_dtype) == 0 && w_row_bytes >= dtype_nbytes(weight_dtype, k))
      << "quant_linear: k = " << k << ", row bytes " << w_row_bytes << " for " << dtype_name(weight_dtype);
  if (m == 0 || n == 0) return;
  // One quantized copy of x per call; the workers read it (the caller's thread-local buffer).
  // (A thread_local is not captured by the lambda below: each worker would see its own; hence `act`.)
  thread_local Q8Activations tls_act;
  Q8Activations& act = tls_act;
  quantize_activations(isa, x, m, k, ldx, activation_block(weight_dtype), &act);
  const auto* w = static_cast<const uint8_t*>(weight);
  // Chunks of weight rows per task; a task runs every activation row over its chunk.
  const int64_t grain = m == 1 ? 16 : kWeightTile;
  // Batches of the types that have unpacked kernels: each tile of weight rows is unpacked once per
  // pass (into this worker's scratch) and read by all the pass's row groups.
  const size_t unpacked_bytes = m > kMaxDotRows ? unpacked_row_bytes(isa, weight_dtype, k) : 0;
  const int64_t tile =
      unpacked_bytes == 0
          ? kWeightTile
          : std::clamp<int64_t>(kUnpackedTileBytes / static_cast<int64_t>(unpacked_bytes), 1, kWeightTile);
  // A prefill's chunk of rows runs for milliseconds: finer chunks, so the threads finish together.
  const int chunks_per_thread =
      m >= kActPass ? ThreadPool::kLongCallChunksPerThread : ThreadPool::kChunksPerThread;
  parallel_for(n, grain, [&](int64_t j_begin, int64_t j_end) {
    thread_local std::vector<uint8_t> tls_tile;  // this worker's
    if (unpacked_bytes != 0) tls_tile.resize(static_cast<size_t>(tile) * unpacked_bytes);
    for (int64_t i0 = 0; i0 < m; i0 += kActPass) {
      const int64_t i_end = std::min(m, i0 + kActPass);
      for (int64_t j = j_begin; j < j_end; j += tile) {
        const int64_t nj = std::min(tile, j_end - j);
        const uint8_t* wj = w + static_cast<size_t>(j) * w_row_bytes;
        if (unpacked_bytes != 0)
          quant_unpack_rows(isa, weight_dtype, wj, w_row_bytes, nj, k, tls_tile.data());
        for (int64_t i = i0; i < i_end; i += kMaxDotRows) {
          const int nr = static_cast<int>(std::min<int64_t>(kMaxDotRows, i_end - i));
          if (unpacked_bytes != 0) {
            quant_dot_unpacked_rows(isa, weight_dtype, tls_tile.data(), nj, act, i, nr, out + i * ldo + j,
                                    ldo);
          } else {
            quant_dot_rows(isa, weight_dtype, wj, w_row_bytes, nj, act, i, nr, out + i * ldo + j, ldo);
          }
        }
      }
    }
  }, chunks_per_thread);
  if (bias != nullptr) add_bias_rows(bias, bias_dtype, m, n, out, ldo);
}

}  // namespace rlm::cpu
