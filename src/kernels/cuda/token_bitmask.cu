#include "kernels/cuda/token_bitmask.h"

#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"

namespace rlm::cuda {
namespace {

constexpr int kBlock = 256;

// grid (ceil(words / kBlock), m): thread w of row j masks tokens [32 w, 32 w + 32) of logits row rows[j].
__global__ void apply_token_bitmask_kernel(float* __restrict__ logits, int64_t vocab, int64_t ld,
                                           const int32_t* __restrict__ bitmask, int64_t words,
                                           const int32_t* __restrict__ rows) {
  const int64_t j = blockIdx.y;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kBlock + threadIdx.x;
  if (w * 32 >= vocab) return;
  const uint32_t mask = static_cast<uint32_t>(bitmask[j * words + w]);
  if (mask == 0xffffffffu) return;
  float* row = logits + static_cast<int64_t>(rows[j]) * ld;
  const int64_t end = min(vocab, w * 32 + 32);
  for (int64_t t = w * 32; t < end; ++t) {
    if (((mask >> (t & 31)) & 1u) == 0) row[t] = -INFINITY;
  }
}

}  // namespace

void apply_token_bitmask(int device, float* logits, int64_t vocab, int64_t ld, const int32_t* bitmask, int64_t words,
                         const int32_t* rows, int64_t m) {
  if (m == 0 || vocab == 0) return;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const int64_t used_words = (vocab + 31) / 32;
  const dim3 grid(static_cast<unsigned>((used_words + kBlock - 1) / kBlock), static_cast<unsigned>(m));
  apply_token_bitmask_kernel<<<grid, kBlock, 0, stream>>>(logits, vocab, ld, bitmask, words, rows);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
