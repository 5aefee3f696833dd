// CUDA sparse-MoE kernels (twin of kernels/cpu/moe.cpp). Routing: one block per token. Experts:
// validate + count (one kernel), read the counts back once, group the (token, route) entries per
// expert in token order (one block per expert, a block-wide scan), gather the rows, one linear pair
// per expert (float weights through cuda::linear, GGUF block-quantized ones kept in their blocks
// through cuda::quant_linear, as ops::linear multiplies them, FP8 ones through cuda::fp8_linear
// with the expert's scales, as ops::linear with Fp8Scales), SiLU-and-mul over all rows, then
// each token sums its routes' outputs in increasing expert id, starting from zero, like the CPU.
#include "kernels/cuda/moe.h"

#include <vector>

#include "core/cuda_check.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/quant_matmul.h"

namespace rlm::cuda {
namespace {

constexpr int kRouteThreads = 128;
constexpr int32_t kNoError = 0x7f7f7f7f;  // the flag after memset(0x7f)
constexpr int kBadId = 1, kRepeatedId = 2;

// (p, id) ordering of the router: larger p first, ties to the lower id. Taken entries hold
// kTaken; a NaN probability ranks below every number but above taken entries.
constexpr float kTaken = -2.0f;
__device__ __forceinline__ bool better(float pa, int ia, float pb, int ib) {
  return pa > pb || (pa == pb && ia < ib);
}
__device__ __forceinline__ float rank_value(float p) { return isnan(p) ? -1.5f : p; }

__global__ void topk_softmax_kernel(const float* logits, int64_t ld, int64_t num_experts, int64_t top_k,
                                    bool renormalize, float* weights, int32_t* ids) {
  extern __shared__ float p[];  // [num_experts]
  __shared__ float best_p[32];
  __shared__ int best_i[32];
  __shared__ float sel_p[kMaxMoeTopK];
  __shared__ int sel_i[kMaxMoeTopK];
  const int64_t t = blockIdx.x;
  const float* row = logits + t * ld;
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < num_experts; e += blockDim.x) mx = fmaxf(mx, row[e]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < num_experts; e += blockDim.x) sum += p[e] = expf(row[e] - mx);
  sum = block_sum(sum);
  for (int64_t e = threadIdx.x; e < num_experts; e += blockDim.x) p[e] /= sum;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  for (int64_t j = 0; j < top_k; ++j) {
    float bp = -INFINITY;  // every thread with an expert picks one (even a taken one) over this
    int bi = 0x7fffffff;
    for (int64_t e = threadIdx.x; e < num_experts; e += blockDim.x) {
      if (better(rank_value(p[e]), static_cast<int>(e), bp, bi)) {
        bp = rank_value(p[e]);
        bi = static_cast<int>(e);
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float op = __shfl_xor_sync(0xffffffffu, bp, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (better(op, oi, bp, bi)) {
        bp = op;
        bi = oi;
      }
    }
    if (lane == 0) {
      best_p[warp] = bp;
      best_i[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      bp = best_p[0];
      bi = best_i[0];
      for (int w = 1; w < num_warps; ++w) {
        if (better(best_p[w], best_i[w], bp, bi)) {
          bp = best_p[w];
          bi = best_i[w];
        }
      }
      sel_p[j] = p[bi];
      sel_i[j] = bi;
      p[bi] = kTaken;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) total += sel_p[j];
    for (int64_t j = 0; j < top_k; ++j) {
      weights[t * top_k + j] = renormalize ? sel_p[j] / total : sel_p[j];
      ids[t * top_k + j] = sel_i[j];
    }
  }
}

// One thread per entry (t, j): range and repeat checks (the lowest entry * 4 + code wins), then
// the per-expert count.
__global__ void count_kernel(const int32_t* ids, int64_t n, int64_t top_k, int64_t num_experts, int32_t* counts) {
  int32_t* flag = counts + num_experts;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * top_k;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t e = ids[idx];
    if (e < 0 || e >= num_experts) {
      atomicMin(flag, static_cast<int32_t>(idx * 4 + kBadId));
      continue;
    }
    const int64_t t0 = idx - idx % top_k;
    bool repeated = false;
    for (int64_t i = t0; i < idx; ++i) repeated = repeated || ids[i] == e;
    if (repeated) atomicMin(flag, static_cast<int32_t>(idx * 4 + kRepeatedId));
    atomicAdd(&counts[e], 1);
  }
}

// One block per expert: its entries in token order get consecutive grouped rows after the rows
// of the lower experts (a block-wide exclusive scan per tile of blockDim entries).
__global__ void group_kernel(const int32_t* ids, int64_t entries, int64_t top_k, const int32_t* counts,
                             int32_t* sorted_token, int32_t* row_of_entry) {
  __shared__ int warp_counts[32];
  __shared__ int64_t base_s;
  const int e = blockIdx.x;
  if (counts[e] == 0) return;
  if (threadIdx.x == 0) {
    int64_t off = 0;
    for (int i = 0; i < e; ++i) off += counts[i];
    base_s = off;
  }
  __syncthreads();
  int64_t base = base_s;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  for (int64_t tile = 0; tile < entries; tile += blockDim.x) {
    const int64_t idx = tile + threadIdx.x;
    const bool mine = idx < entries && ids[idx] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = 0, tile_total = 0;
    for (int w = 0; w < num_warps; ++w) {
      if (w < warp) before += warp_counts[w];
      tile_total += warp_counts[w];
    }
    if (mine) {
      const int64_t row = base + before + __popc(ballot & ((1u << lane) - 1u));
      sorted_token[row] = static_cast<int32_t>(idx / top_k);
      row_of_entry[idx] = static_cast<int32_t>(row);
    }
    base += tile_total;
    __syncthreads();  // warp_counts is rewritten by the next tile
  }
}

__global__ void gather_rows_kernel(const float* x, int64_t ldx, const int32_t* sorted_token, int64_t rows,
                                   int64_t hidden, float* xs) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows * hidden;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / hidden, c = idx % hidden;
    xs[idx] = x[static_cast<int64_t>(sorted_token[i]) * ldx + c];
  }
}

// One block per token: its routes sorted by expert id (thread 0, top_k is small), then
// out[t, c] = sum in that order of weight * y[row, c], from zero.
__global__ void combine_kernel(const float* y, int64_t hidden, const float* weights, const int32_t* ids,
                               const int32_t* row_of_entry, int64_t top_k, float* out, int64_t ldo) {
  __shared__ int route_row[kMaxMoeTopK];
  __shared__ float route_w[kMaxMoeTopK];
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int order[kMaxMoeTopK];
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t i = j;
      while (i > 0 && ids[t * top_k + order[i - 1]] > ids[t * top_k + j]) {
        order[i] = order[i - 1];
        --i;
      }
      order[i] = static_cast<int>(j);
    }
    for (int64_t j = 0; j < top_k; ++j) {
      route_row[j] = row_of_entry[t * top_k + order[j]];
      route_w[j] = weights[t * top_k + order[j]];
    }
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) acc += y[static_cast<int64_t>(route_row[j]) * hidden + c] * route_w[j];
    out[t * ldo + c] = acc;
  }
}

// ys[m, rows] = xs[m, cols] @ expert e's matrix^T, expert e being [rows, cols] of a contiguous
// stacked [num_experts, rows, cols] tensor (float: cuda::linear; block-quantized: cuda::quant_linear
// on the expert's rows, each row dtype_nbytes(dtype, cols) bytes; f8e4m3: cuda::fp8_linear on the
// expert's rows and its slice of the stacked scales).
void expert_linear(int device, const MoeExpertWeights& w, int64_t e, int64_t rows, int64_t cols,
                   const float* xs, int64_t m, float* ys) {
  const size_t row_bytes = dtype_nbytes(w.dtype, cols);
  const char* data = static_cast<const char*>(w.data) + static_cast<size_t>(e * rows) * row_bytes;
  if (w.dtype == DType::kF8E4M3) {
    Fp8Weight f;
    f.data = data;
    f.n = rows;
    f.k = cols;
    f.ldw = cols;
    const bool blocks = w.block_n > 0;
    const int64_t scales_per_expert =
        blocks ? ((rows + w.block_n - 1) / w.block_n) * ((cols + w.block_k - 1) / w.block_k) : rows;
    f.scale = w.fp8_scale + e * scales_per_expert;
    f.block_n = w.block_n;
    f.block_k = w.block_k;
    fp8_linear(device, xs, m, cols, f, nullptr, DType::kF32, ys, rows);
  } else if (is_quantized(w.dtype)) {
    quant_linear(device, xs, m, cols, cols, data, w.dtype, rows, row_bytes, nullptr, DType::kF32, ys, rows);
  } else {
    linear(device, xs, m, cols, cols, data, w.dtype, rows, cols, nullptr, DType::kF32, ys, rows);
  }
}

}  // namespace

void moe_topk_softmax(int device, const float* logits, int64_t ld, int64_t n, int64_t num_experts, int64_t top_k,
                      bool renormalize, float* weights, int32_t* ids) {
  RLM_CHECK(top_k >= 1 && top_k <= kMaxMoeTopK && top_k <= num_experts) << "moe_topk_softmax: top_k " << top_k;
  if (n == 0) return;
  RLM_CHECK(n <= 0x7fffffff) << "moe_topk_softmax: " << n << " tokens";
  const size_t shared = static_cast<size_t>(num_experts) * sizeof(float);
  RLM_CHECK(shared <= 32 * 1024) << "moe_topk_softmax: " << num_experts << " experts exceed the shared memory";
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  topk_softmax_kernel<<<static_cast<unsigned>(n), kRouteThreads, shared, stream>>>(logits, ld, num_experts, top_k,
                                                                                  renormalize, weights, ids);
  RLM_CUDA_CHECK_LAUNCH();
}

std::string moe_experts(int device, const float* x, int64_t ldx, int64_t n, int64_t hidden, int64_t inter,
                        int64_t num_experts, const MoeExpertWeights& gate_up, const MoeExpertWeights& down,
                        const float* weights, const int32_t* ids, int64_t top_k, const MoeWorkspace& ws,
                        float* out, int64_t ldo) {
  RLM_CHECK(top_k >= 1 && top_k <= kMaxMoeTopK) << "moe_experts: top_k " << top_k;
  for (const MoeExpertWeights* w : {&gate_up, &down}) {
    RLM_CHECK(w->dtype != DType::kF8E4M3 || w->fp8_scale != nullptr)
        << "moe_experts: f8e4m3 experts without scales";
  }
  RLM_CHECK(gate_up.dtype != DType::kF8E4M3 || gate_up.block_n == 0 || inter % gate_up.block_n == 0)
      << "moe_experts: block-scaled gate_up with inter " << inter << " not a multiple of block_n "
      << gate_up.block_n;
  const int64_t entries = n * top_k;
  if (n == 0) return "";
  RLM_CHECK(entries * 4 + 4 <= 0x7fffffff && num_experts <= 0x7fffffff) << "moe_experts: too many entries";
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  RLM_CUDA_CHECK(cudaMemsetAsync(ws.counts, 0, static_cast<size_t>(num_experts) * sizeof(int32_t), stream));
  RLM_CUDA_CHECK(cudaMemsetAsync(ws.counts + num_experts, 0x7f, sizeof(int32_t), stream));
  count_kernel<<<grid_for(entries), kBlock, 0, stream>>>(ids, n, top_k, num_experts, ws.counts);
  RLM_CUDA_CHECK_LAUNCH();
  std::vector<int32_t> counts(static_cast<size_t>(num_experts + 1));
  RLM_CUDA_CHECK(cudaMemcpyAsync(counts.data(), ws.counts, counts.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                 stream));
  RLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int32_t flag = counts[num_experts];
  if (flag != kNoError) {
    // The CPU checker's messages (ops/moe_ops.cpp), the id read back.
    const int64_t entry = flag / 4, t = entry / top_k, j = entry % top_k;
    int32_t id = 0;
    RLM_CUDA_CHECK(cudaMemcpy(&id, ids + entry, sizeof(id), cudaMemcpyDeviceToHost));
    return flag % 4 == kBadId
               ? str("topk_ids[", t, ", ", j, "] = ", id, " is outside [0, num_experts = ", num_experts, ")")
               : str("token ", t, " lists expert ", id, " twice");
  }
  group_kernel<<<static_cast<unsigned>(num_experts), kBlock, 0, stream>>>(ids, entries, top_k, ws.counts,
                                                                         ws.sorted_token, ws.row_of_entry);
  RLM_CUDA_CHECK_LAUNCH();
  gather_rows_kernel<<<grid_for(entries * hidden), kBlock, 0, stream>>>(x, ldx, ws.sorted_token, entries, hidden,
                                                                        ws.xs);
  RLM_CUDA_CHECK_LAUNCH();
  int64_t off = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t m = counts[e];
    if (m == 0) continue;
    expert_linear(device, gate_up, e, 2 * inter, hidden, ws.xs + off * hidden, m,
                  ws.gate_up + off * 2 * inter);
    off += m;
  }
  silu_and_mul(device, ws.gate_up, entries, inter, 2 * inter, ws.act, inter);
  off = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t m = counts[e];
    if (m == 0) continue;
    expert_linear(device, down, e, hidden, inter, ws.act + off * inter, m, ws.y + off * hidden);
    off += m;
  }
  RLM_CHECK(n <= 0x7fffffff) << "moe_experts: " << n << " tokens";
  combine_kernel<<<static_cast<unsigned>(n), kBlock, 0, stream>>>(ws.y, hidden, weights, ids, ws.row_of_entry, top_k,
                                                                 out, ldo);
  RLM_CUDA_CHECK_LAUNCH();
  return "";
}

}  // namespace rlm::cuda
