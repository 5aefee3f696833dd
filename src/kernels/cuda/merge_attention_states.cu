// Cascade attention's merge step (twin of cpu::merge_attention_states): combines K attention
// results over disjoint key sets of the same query rows by their log-sum-exps. One thread per
// output element; each recomputes its row's weights (K exps on values in L1/L2), summing the parts
// in the CPU's order (k = 0, 1, ...).
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/paged_attention.h"

namespace rlm::cuda {
namespace {

using namespace attn;

__global__ void merge_states_kernel(const float* parts, const float* lse, int num_parts, int64_t rows, int head_dim,
                                    float* out, float* lse_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * head_dim) return;
  const int64_t row = i / head_dim;
  const int c = static_cast<int>(i % head_dim);
  float m = kNegInf;
  for (int k = 0; k < num_parts; ++k) m = fmaxf(m, lse[k * rows + row]);
  if (m == kNegInf) {
    out[i] = 0.0f;
    if (lse_out != nullptr && c == 0) lse_out[row] = m;
    return;
  }
  float sum = 0.0f, acc = 0.0f;
  for (int k = 0; k < num_parts; ++k) {
    const float w = expf(lse[k * rows + row] - m);
    sum += w;
    acc = __fadd_rn(acc, __fmul_rn(w, parts[(k * rows + row) * head_dim + c]));  // no FMA: the CPU's rounding
  }
  out[i] = acc * (1.0f / sum);
  if (lse_out != nullptr && c == 0) lse_out[row] = m + logf(sum);
}

}  // namespace

void merge_attention_states(const float* parts, const float* lse, int64_t num_parts, int64_t n, int64_t heads,
                            int64_t head_dim, float* out, float* lse_out) {
  RLM_CHECK(num_parts >= 1 && num_parts <= 1024 && n >= 0 && heads > 0 && head_dim > 0)
      << "cuda::merge_attention_states: bad shape [" << num_parts << ", " << n << ", " << heads << ", " << head_dim
      << "]";
  const int64_t total = n * heads * head_dim;
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  RLM_CHECK(blocks <= 0x7fffffff) << "cuda::merge_attention_states: " << total << " elements";
  merge_states_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, current_stream()>>>(
      parts, lse, static_cast<int>(num_parts), n * heads, static_cast<int>(head_dim), out, lse_out);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
}

}  // namespace rlm::cuda
