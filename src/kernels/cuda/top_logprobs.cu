#include "kernels/cuda/top_logprobs.h"

#include <climits>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

constexpr int kTopBlock = 1024;

// cpu::logprob_before on the device: larger value first, equal values by the lower id, NaN last.
__device__ __forceinline__ bool before(float va, int32_t ia, float vb, int32_t ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// One block per row. Round i picks the best candidate ranked strictly after pick i - 1, so no
// list of earlier picks is kept. The "none" candidate (NaN, INT_MAX) ranks after every element.
__global__ void top_logprobs_kernel(const float* logprobs, int64_t vocab, int64_t ld, const int32_t* tokens, int64_t k,
                                    float* chosen, int32_t* top_ids, float* top_values) {
  __shared__ float warp_v[32];
  __shared__ int32_t warp_i[32];
  __shared__ float pick_v;
  __shared__ int32_t pick_i;
  const int64_t r = blockIdx.x;
  const float* x = logprobs + r * ld;
  const float nan = __int_as_float(0x7fc00000);
  if (threadIdx.x == 0) {
    const int32_t t = tokens[r];
    chosen[r] = t >= 0 && t < vocab ? x[t] : nan;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  float prev_v = nan;
  int32_t prev_i = -1;
  for (int64_t round = 0; round < k; ++round) {
    float bv = nan;
    int32_t bi = INT_MAX;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float v = x[j];
      const int32_t id = static_cast<int32_t>(j);
      if (round > 0 && !before(prev_v, prev_i, v, id)) continue;  // picked in an earlier round
      if (before(v, id, bv, bi)) {
        bv = v;
        bi = id;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (before(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      warp_v[warp] = bv;
      warp_i[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = warp_v[0];
      int32_t i = warp_i[0];
      for (int w = 1; w < num_warps; ++w) {
        if (before(warp_v[w], warp_i[w], v, i)) {
          v = warp_v[w];
          i = warp_i[w];
        }
      }
      top_ids[r * k + round] = i;
      top_values[r * k + round] = v;
      pick_v = v;
      pick_i = i;
    }
    __syncthreads();
    prev_v = pick_v;
    prev_i = pick_i;
  }
}

}  // namespace

void top_logprobs(int device, const float* logprobs, int64_t n, int64_t vocab, int64_t ld, const int32_t* tokens,
                  int64_t k, float* chosen, int32_t* top_ids, float* top_values) {
  if (n == 0) return;
  RLM_CHECK(vocab > 0 && vocab < INT_MAX && k >= 0 && k <= vocab && n <= INT_MAX)
      << "top_logprobs: bad shape n " << n << ", vocab " << vocab << ", k " << k;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  top_logprobs_kernel<<<static_cast<unsigned>(n), kTopBlock, 0, stream>>>(logprobs, vocab, ld, tokens, k, chosen,
                                                                         top_ids, top_values);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
