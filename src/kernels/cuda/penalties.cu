#include "kernels/cuda/penalties.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/device.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

// A penalised row as the kernel reads it (host-packed).
struct DeviceRow {
  int32_t row;           // logits row
  int32_t begin, end;    // its tokens: tokens[begin, end)
  int32_t prompt_len;
  int32_t pending_slot;  // -1: none
  float repetition, frequency, presence;
  int32_t bias_begin, bias_end;  // its logit_bias entries: bias_ids/bias_values[bias_begin, bias_end)
};

// Count words: the output count in the low bits, kSeen when the token is in the prompt.
constexpr int32_t kSeen = 1 << 30;

// penalize_logit of kernels/cpu/penalties.cpp with one rounding per operation (no FMA contraction).
__device__ __forceinline__ float penalize(float x, int32_t word, const DeviceRow& p) {
  const int32_t count = word & (kSeen - 1);
  if (p.repetition != 1.0f) x = x > 0.0f ? __fdiv_rn(x, p.repetition) : __fmul_rn(x, p.repetition);
  if (count > 0 && (p.frequency != 0.0f || p.presence != 0.0f)) {
    x = __fsub_rn(x, __fadd_rn(__fmul_rn(p.frequency, static_cast<float>(count)), p.presence));
  }
  return x;
}

// One block per penalised row; counts: int32 [num_rows, vocab] scratch (any contents on entry).
// 1) zero the row's counts; 2) count: atomicOr(kSeen) for prompt tokens, atomicAdd(1) for output
// tokens (and the pending token); 3) each list entry takes its token's word with atomicExch(0): the
// one entry that finds it non-zero applies the penalties to that logit, so every distinct token is
// penalised exactly once, whichever thread gets there first (the value depends only on the word);
// 4) the logit_bias entries (distinct ids) are added.
__global__ void apply_penalties_kernel(float* logits, int64_t vocab, int64_t ld, const DeviceRow* rows,
                                       const int32_t* tokens, const int32_t* table, const int32_t* bias_ids,
                                       const float* bias_values, int32_t* counts) {
  const DeviceRow p = rows[blockIdx.x];
  int32_t* c = counts + static_cast<int64_t>(blockIdx.x) * vocab;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) c[t] = 0;
  __syncthreads();
  // Position `len` of the row is the pending token (when there is one).
  int32_t pending = -1;
  if (p.pending_slot >= 0) {
    const int32_t t = table[p.pending_slot];
    if (t >= 0 && t < vocab) pending = t;  // out of range: skipped (documented in penalties.h)
  }
  const int32_t len = p.end - p.begin;
  const int32_t total = len + (pending >= 0 ? 1 : 0);
  for (int32_t j = threadIdx.x; j < total; j += blockDim.x) {
    const int32_t t = j < len ? tokens[p.begin + j] : pending;
    if (j < p.prompt_len) {
      atomicOr(&c[t], kSeen);
    } else {
      atomicAdd(&c[t], 1);
    }
  }
  __syncthreads();
  float* x = logits + static_cast<int64_t>(p.row) * ld;
  for (int32_t j = threadIdx.x; j < total; j += blockDim.x) {
    const int32_t t = j < len ? tokens[p.begin + j] : pending;
    const int32_t word = atomicExch(&c[t], 0);
    if (word != 0) x[t] = penalize(x[t], word, p);
  }
  if (p.bias_end == p.bias_begin) return;
  __syncthreads();
  for (int32_t j = p.bias_begin + threadIdx.x; j < p.bias_end; j += blockDim.x) {
    x[bias_ids[j]] = __fadd_rn(x[bias_ids[j]], bias_values[j]);
  }
}

size_t align_up(size_t n) { return (n + 255) & ~size_t{255}; }

}  // namespace

void apply_penalties(int device, float* logits, int64_t n, int64_t vocab, int64_t ld, const int32_t* token_ids,
                     const int32_t* offsets, const cpu::PenaltyRow* rows, const int32_t* table,
                     const cpu::LogitBiasList& bias) {
  std::vector<DeviceRow> active;
  std::vector<int32_t> tokens, bias_ids;
  std::vector<float> bias_values;
  for (int64_t r = 0; r < n; ++r) {
    const cpu::PenaltyRow& p = rows[r];
    const int32_t b0 = bias.ids != nullptr ? bias.offsets[r] : 0, b1 = bias.ids != nullptr ? bias.offsets[r + 1] : 0;
    const bool penalised = cpu::penalty_row_active(p);
    if (!penalised && b1 == b0) continue;
    RLM_CHECK(!penalised || p.pending_slot < 0 || table != nullptr)
        << "apply_penalties: row " << r << " has a pending slot but no table";
    DeviceRow d;
    d.row = static_cast<int32_t>(r);
    d.begin = static_cast<int32_t>(tokens.size());
    if (penalised) tokens.insert(tokens.end(), token_ids + offsets[r], token_ids + offsets[r + 1]);
    d.end = static_cast<int32_t>(tokens.size());
    d.prompt_len = penalised ? p.prompt_len : 0;
    d.pending_slot = penalised ? p.pending_slot : -1;
    d.repetition = penalised ? p.repetition : 1.0f;
    d.frequency = penalised ? p.frequency : 0.0f;
    d.presence = penalised ? p.presence : 0.0f;
    d.bias_begin = static_cast<int32_t>(bias_ids.size());
    bias_ids.insert(bias_ids.end(), bias.ids + b0, bias.ids + b1);
    bias_values.insert(bias_values.end(), bias.values + b0, bias.values + b1);
    d.bias_end = static_cast<int32_t>(bias_ids.size());
    active.push_back(d);
  }
  if (active.empty()) return;
  RLM_CHECK(vocab > 0 && vocab < kSeen) << "apply_penalties: vocab " << vocab;
  const size_t rows_bytes = align_up(active.size() * sizeof(DeviceRow));
  const size_t tokens_bytes = align_up(tokens.size() * sizeof(int32_t) + 4);
  const size_t bias_bytes = align_up(bias_ids.size() * sizeof(int32_t) + 4);  // ids, then as many values
  // Rows per launch: their counts take at most kCountsBytes of scratch (launches reuse it in stream
  // order; every launch zeroes its rows first).
  constexpr size_t kCountsBytes = size_t{64} << 20;
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(int32_t);
  const size_t group = std::min(active.size(), std::max<size_t>(1, kCountsBytes / row_bytes));
  const size_t counts_bytes = group * row_bytes;
  // One staged upload for the row table, the token lists and the bias entries.
  const size_t head_bytes = rows_bytes + tokens_bytes + 2 * bias_bytes;
  std::vector<char> packed(head_bytes);
  std::memcpy(packed.data(), active.data(), active.size() * sizeof(DeviceRow));
  if (!tokens.empty()) std::memcpy(packed.data() + rows_bytes, tokens.data(), tokens.size() * sizeof(int32_t));
  if (!bias_ids.empty()) {
    std::memcpy(packed.data() + rows_bytes + tokens_bytes, bias_ids.data(), bias_ids.size() * sizeof(int32_t));
    std::memcpy(packed.data() + rows_bytes + tokens_bytes + bias_bytes, bias_values.data(),
                bias_values.size() * sizeof(float));
  }

  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  char* base = static_cast<char*>(ctx.scratch(head_bytes + counts_bytes));
  device_memcpy(base, Device::cuda(device), packed.data(), Device::cpu(), packed.size());
  const auto* d_rows = reinterpret_cast<const DeviceRow*>(base);
  const auto* d_tokens = reinterpret_cast<const int32_t*>(base + rows_bytes);
  const auto* d_bias_ids = reinterpret_cast<const int32_t*>(base + rows_bytes + tokens_bytes);
  const auto* d_bias_values = reinterpret_cast<const float*>(base + rows_bytes + tokens_bytes + bias_bytes);
  auto* d_counts = reinterpret_cast<int32_t*>(base + head_bytes);
  for (size_t g0 = 0; g0 < active.size(); g0 += group) {
    const size_t g = std::min(group, active.size() - g0);
    apply_penalties_kernel<<<static_cast<unsigned>(g), kBlock, 0, stream>>>(logits, vocab, ld, d_rows + g0, d_tokens,
                                                                          table, d_bias_ids, d_bias_values, d_counts);
    RLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace rlm::cuda
