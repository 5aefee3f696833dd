#include "kernels/cuda/sampling.h"

#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/softmax_row.cuh"

namespace rlm::cuda {
namespace {

enum Mode : int32_t { kGreedy = 0, kPlain = 1, kFiltered = 2 };

// Device copy of one row's parameters.
struct RowParams {
  int32_t mode;
  int32_t top_k;  // > 0 and < v when top-k is on, else 0
  float inv_t;    // 1 / temperature (computed in f32 like the CPU)
  float top_p;    // < 1 when top-p is on
  float min_p;    // > 0 when min-p is on
  double uniform;
};

inline constexpr int64_t kSortElements = int64_t{1} << 24;  // sort scratch: rows per group * v <= this

// Largest index in [0, len) with value(i) > 0 (0 when none). All threads call; all get it.
template <typename F>
__device__ int64_t block_last_positive(F value, int64_t len) {
  long long best = 0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    if (value(i) > 0.0) best = max(best, static_cast<long long>(i));
  }
  __shared__ long long warp_best[32];
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  __syncthreads();
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  long long m = warp_best[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) m = max(m, warp_best[w]);
  return m;
}

// The first index whose running sum exceeds target, else the last positive one (CPU `pick`).
template <typename F>
__device__ int64_t block_pick(F value, int64_t len, double target) {
  const int64_t i = block_first_crossing<false>(value, len, target);
  return i >= 0 ? i : block_last_positive(value, len);
}

// Row max of logits * inv_t the CPU way: max of the raw logits (NaNs skipped), then * inv_t.
__device__ float scaled_max(const float* x, int64_t v, float inv_t) {
  float m = -INFINITY;
  for_each_in_row(x, v, [&](float xj, int64_t) { m = fmaxf(m, xj); });
  return block_max(m) * inv_t;
}

// One block per row: greedy and unfiltered rows are finished here; filtered rows are skipped.
__global__ void sample_simple_kernel(const float* logits, int64_t v, int64_t ld, const RowParams* params,
                                     int32_t* out, int64_t out_stride) {
  const int64_t row = blockIdx.x;
  const RowParams p = params[row];
  const float* x = logits + row * ld;
  int64_t token = 0;
  if (p.mode == kGreedy) {
    token = block_argmax(x, v);
  } else if (p.mode == kPlain) {
    const float m = scaled_max(x, v, p.inv_t);
    auto prob = [&](int64_t j) { return static_cast<double>(expf(__fsub_rn(__fmul_rn(x[j], p.inv_t), m))); };
    double total = 0.0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) total += prob(j);
    total = block_sum(total);
    token = block_pick(prob, v, p.uniform * total);
  } else {
    return;  // the whole block returns together
  }
  if (threadIdx.x == 0) out[row * out_stride] = static_cast<int32_t>(token);
}

// One block per filtered row of the group: unnormalised probabilities (the CPU's f32 exp values)
// as sort keys and the token ids as values.
__global__ void sample_probs_kernel(const float* logits, int64_t v, int64_t ld, const RowParams* params,
                                    const int32_t* rows, float* keys, int32_t* ids, int32_t* offsets) {
  const int64_t r = blockIdx.x;
  const int64_t row = rows[r];
  const float inv_t = params[row].inv_t;
  const float* x = logits + row * ld;
  const float m = scaled_max(x, v, inv_t);
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) {
    keys[r * v + j] = expf(__fsub_rn(__fmul_rn(x[j], inv_t), m));
    ids[r * v + j] = static_cast<int32_t>(j);
  }
  if (threadIdx.x == 0) {
    offsets[r] = static_cast<int32_t>(r * v);
    if (r == gridDim.x - 1) offsets[r + 1] = static_cast<int32_t>((r + 1) * v);
  }
}

// One block per filtered row: top-k, top-p, min-p over the sorted probabilities, then the draw.
__global__ void sample_filtered_kernel(int64_t v, const RowParams* params, const int32_t* rows, const float* keys,
                                       const int32_t* ids, int32_t* out, int64_t out_stride) {
  const int64_t r = blockIdx.x;
  const int64_t row = rows[r];
  const RowParams p = params[row];
  const float* sp = keys + r * v;  // descending; ties keep ascending ids (stable sort)
  const int32_t* sid = ids + r * v;
  auto prob = [&](int64_t i) { return static_cast<double>(sp[i]); };
  int64_t keep = p.top_k > 0 ? p.top_k : v;
  if (p.top_p < 1.0f) {
    double kept = 0.0;
    for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) kept += prob(i);
    kept = block_sum(kept);
    const int64_t i = block_first_crossing<true>(prob, keep, static_cast<double>(p.top_p) * kept);
    keep = i < 0 ? keep : i + 1;
    keep = keep < 1 ? 1 : keep;
  }
  if (p.min_p > 0.0f) {
    const double threshold = static_cast<double>(p.min_p) * prob(0);
    long long count = 0;
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) count += prob(i) >= threshold ? 1 : 0;
    count = block_sum(count);
    keep = min(keep, static_cast<int64_t>(count < 1 ? 1 : count));
  }
  double kept = 0.0;
  for (int64_t i = threadIdx.x; i < keep; i += blockDim.x) kept += prob(i);
  kept = block_sum(kept);
  const int64_t i = block_pick(prob, keep, p.uniform * kept);
  if (threadIdx.x == 0) out[row * out_stride] = sid[i];
}

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t items, int64_t segments, cudaStream_t stream) {
  size_t bytes = 0;
  RLM_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(items),
      static_cast<int>(segments), static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr), 0,
      32, stream));
  return bytes;
}

}  // namespace

void sample(int device, const float* logits, int64_t n, int64_t v, int64_t ld, const SampleRow* rows, int32_t* out,
            int64_t out_stride) {
  if (n == 0) return;
  RLM_CHECK(v > 0 && v <= kSortElements && n <= 0x7fffffff) << "sample: bad logits shape [" << n << ", " << v << "]";
  std::vector<RowParams> params(static_cast<size_t>(n));
  std::vector<int32_t> filtered;
  for (int64_t i = 0; i < n; ++i) {
    const SampleRow& s = rows[i];
    RowParams& p = params[i];
    const bool greedy = !(s.temperature >= 1e-5f) || s.top_k == 1;
    p.top_k = s.top_k > 0 && s.top_k < v ? s.top_k : 0;
    p.inv_t = greedy ? 1.0f : 1.0f / s.temperature;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.uniform = s.uniform;
    const bool filters = p.top_k > 0 || s.top_p < 1.0f || s.min_p > 0.0f;
    p.mode = greedy ? kGreedy : (filters ? kFiltered : kPlain);
    if (p.mode == kFiltered) filtered.push_back(static_cast<int32_t>(i));
  }
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());

  const int64_t nf = static_cast<int64_t>(filtered.size());
  const int64_t group = nf == 0 ? 0 : std::min<int64_t>(nf, std::max<int64_t>(1, kSortElements / v));
  const size_t params_bytes = align_up(params.size() * sizeof(RowParams));
  const size_t rows_bytes = align_up(filtered.size() * sizeof(int32_t) + 4);
  const size_t offsets_bytes = align_up(static_cast<size_t>(group + 1) * sizeof(int32_t));
  const size_t array_bytes = align_up(static_cast<size_t>(group * v) * 4);
  const size_t temp_bytes = group == 0 ? 0 : align_up(sort_temp_bytes(group * v, group, stream));
  char* base = static_cast<char*>(
      ctx.scratch(params_bytes + rows_bytes + offsets_bytes + 4 * array_bytes + temp_bytes));
  auto* d_params = reinterpret_cast<RowParams*>(base);
  auto* d_rows = reinterpret_cast<int32_t*>(base + params_bytes);
  auto* d_offsets = reinterpret_cast<int32_t*>(base + params_bytes + rows_bytes);
  char* arrays = base + params_bytes + rows_bytes + offsets_bytes;
  auto* keys_in = reinterpret_cast<float*>(arrays);
  auto* keys_out = reinterpret_cast<float*>(arrays + array_bytes);
  auto* ids_in = reinterpret_cast<int32_t*>(arrays + 2 * array_bytes);
  auto* ids_out = reinterpret_cast<int32_t*>(arrays + 3 * array_bytes);
  void* temp = arrays + 4 * array_bytes;

  // Staged uploads (core's device_memcpy): the host vectors may die at return, and nothing here
  // waits for the device, so an overlapped step's sampling does not block the host.
  device_memcpy(d_params, Device::cuda(device), params.data(), Device::cpu(), params.size() * sizeof(RowParams));
  if (nf > 0) {
    device_memcpy(d_rows, Device::cuda(device), filtered.data(), Device::cpu(), filtered.size() * sizeof(int32_t));
  }
  sample_simple_kernel<<<static_cast<unsigned>(n), kScanBlock, 0, stream>>>(logits, v, ld, d_params, out, out_stride);
  RLM_CUDA_CHECK_LAUNCH();
  for (int64_t g0 = 0; g0 < nf; g0 += group) {
    const int64_t g = std::min(group, nf - g0);
    sample_probs_kernel<<<static_cast<unsigned>(g), kScanBlock, 0, stream>>>(logits, v, ld, d_params, d_rows + g0,
                                                                             keys_in, ids_in, d_offsets);
    RLM_CUDA_CHECK_LAUNCH();
    size_t bytes = sort_temp_bytes(g * v, g, stream);
    RLM_CHECK(bytes <= temp_bytes) << "sample: sort scratch " << bytes << " > " << temp_bytes;
    RLM_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        temp, bytes, keys_in, keys_out, ids_in, ids_out, static_cast<int>(g * v), static_cast<int>(g), d_offsets,
        d_offsets + 1, 0, 32, stream));
    sample_filtered_kernel<<<static_cast<unsigned>(g), kScanBlock, 0, stream>>>(v, d_params, d_rows + g0, keys_out,
                                                                                ids_out, out, out_stride);
    RLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace rlm::cuda
