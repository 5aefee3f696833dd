// Cascade attention's merge step (twin of cpu::merge_attention_states): combines two attention
// results over disjoint key sets of the same query rows by their log-sum-exps. One thread per
// output element; each recomputes its row's two weights (two exps on values in L1/L2).
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/paged_attention.h"

namespace rlm::cuda {
namespace {

using namespace attn;

__global__ void merge_states_kernel(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b,
                                    int64_t rows, int head_dim, float* out, float* lse_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * head_dim) return;
  const int64_t row = i / head_dim;
  const int c = static_cast<int>(i % head_dim);
  const float la = lse_a[row], lb = lse_b[row];
  const float m = fmaxf(la, lb);
  if (m == kNegInf) {
    out[i] = 0.0f;
    if (lse_out != nullptr && c == 0) lse_out[row] = m;
    return;
  }
  const float wa = expf(la - m), wb = expf(lb - m);
  const float sum = wa + wb;
  const float inv = 1.0f / sum;
  out[i] = (wa * o_a[i] + wb * o_b[i]) * inv;  // element-wise: out may alias o_a or o_b
  if (lse_out != nullptr && c == 0) lse_out[row] = m + logf(sum);
}

}  // namespace

void merge_attention_states(const float* o_a, const float* lse_a, const float* o_b, const float* lse_b, int64_t n,
                            int64_t heads, int64_t head_dim, float* out, float* lse_out) {
  RLM_CHECK(n >= 0 && heads > 0 && head_dim > 0) << "cuda::merge_attention_states: bad shape [" << n << ", "
                                                 << heads << ", " << head_dim << "]";
  const int64_t total = n * heads * head_dim;
  if (total == 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  RLM_CHECK(blocks <= 0x7fffffff) << "cuda::merge_attention_states: " << total << " elements";
  merge_states_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, current_stream()>>>(
      o_a, lse_a, o_b, lse_b, n * heads, static_cast<int>(head_dim), out, lse_out);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
}

}  // namespace rlm::cuda
