// CUDA twins of kernels/cpu/moe.h (pointers on `device`): softmax top-k routing and the routed
// SiLU-gated experts (tokens grouped per expert on the device, one linear pair per expert: cuBLAS
// for float experts, cuda::quant_linear for GGUF block-quantized ones, cuda::fp8_linear for FP8
// ones).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace rlm::cuda {

// One block per token: p = softmax(logits row) (f32, max-subtracted), the top_k largest p (ties:
// lower id), renormalised when asked (summed in rank order like the CPU). top_k <= num_experts.
//   logits: [n, num_experts] (row stride ld); weights: f32 [n, top_k]; ids: i32 [n, top_k].
void moe_topk_softmax(int device, const float* logits, int64_t ld, int64_t n, int64_t num_experts, int64_t top_k,
                      bool renormalize, float* weights, int32_t* ids);

// One stacked expert projection [num_experts, rows, cols], contiguous, on the device.
struct MoeExpertWeights {
  const void* data = nullptr;
  DType dtype = DType::kF32;  // f32/bf16/f16, a GGUF block type, or f8e4m3 (with fp8_scale)
  // f8e4m3 only: the stacked scales, f32 [num_experts, rows] per output channel, or
  // [num_experts, ceil(rows / block_n), ceil(cols / block_k)] per block (block_n, block_k > 0).
  const float* fp8_scale = nullptr;
  int64_t block_n = 0, block_k = 0;
};

// Device buffers for one moe_experts call of n tokens (entries = n * top_k); the caller owns them.
struct MoeWorkspace {
  int32_t* counts = nullptr;         // [num_experts + 1]: tokens per expert, then the error flag
  int32_t* sorted_token = nullptr;   // [entries]: token of each grouped row (experts in id order)
  int32_t* row_of_entry = nullptr;   // [entries]: grouped row of entry t * top_k + j
  float* xs = nullptr;               // [entries, hidden]: the grouped inputs
  float* gate_up = nullptr;          // [entries, 2 * inter]
  float* act = nullptr;              // [entries, inter]
  float* y = nullptr;                // [entries, hidden]: each grouped row's expert output
};

// out[t] = sum over j, in increasing expert id, of weights[t, j] * expert_{ids[t, j]}(x[t]).
// Validates ids on the device first (each in [0, num_experts), none repeated within a token) and
// reads the per-expert counts back to the host once (a synchronisation). Returns "" or a message
// naming the first bad entry (out untouched then).
//   x: [n, hidden] (row stride ldx); gate_up: [num_experts, 2 * inter, hidden]; down:
//   [num_experts, hidden, inter]; weights: f32 [n, top_k]; ids: i32 [n, top_k]; out: [n, hidden]
//   (row stride ldo).
// Each projection is f32/bf16/f16 (expert e's matrix through cuda::linear), a GGUF block type
// (through cuda::quant_linear on expert e's rows, e * rows * dtype_nbytes(dtype, cols) bytes in:
// the 8-bit GEMV for experts given <= kQuantGemvMaxRows rows, bf16-dequantized blocks + cuBLAS
// above; hidden (gate_up) and inter (down) a whole number of blocks of their types) or f8e4m3
// (through cuda::fp8_linear on expert e's rows and scales: the FP8 GEMV for <= kFp8GemvMaxRows
// rows, cuBLASLt or the FMA kernel above; a block-scaled gate_up needs inter % block_n == 0, so
// that the stacked gate and up rows keep their own block grids).
std::string moe_experts(int device, const float* x, int64_t ldx, int64_t n, int64_t hidden, int64_t inter,
                        int64_t num_experts, const MoeExpertWeights& gate_up, const MoeExpertWeights& down,
                        const float* weights, const int32_t* ids, int64_t top_k, const MoeWorkspace& ws,
                        float* out, int64_t ldo);

// top_k above this is refused by the ops layer (shared-memory staging of one token's routes).
inline constexpr int64_t kMaxMoeTopK = 64;

}  // namespace rlm::cuda
