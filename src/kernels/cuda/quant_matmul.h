// CUDA twins of the quantized CPU linear (kernels/cpu/quant_matmul.h) for GGUF block-quantized
// weights kept in their blocks (pointers on `device`; block layouts: formats/gguf_dequant.h).
//
//   m <= kQuantGemvMaxRows (decode): each block quantizes the rows of x to 8-bit 32-value blocks in
//     shared memory (the CPU's quantize_activations arithmetic, bit for bit; for long x a kernel of
//     its own quantizes it once and the blocks copy it, set_quant_gemv_prequantize_min), then one warp per
//     weight row: each lane unpacks a 32-value unit of the row into signed bytes and takes exact
//     integer dot products with __dp4a, scaled once per unit (docs/perf/quant_gemv.md). Q4_K (and
//     Q5_K with more than one row of x) take the paired-group kernel instead: a lane's unit is the
//     two 32-value groups that share their quant bytes, loaded as 16-byte vectors with the
//     super-block's header. Q8_0, Q3_K and Q6_K rows (2-byte-aligned blocks) reach the lanes through
//     a shared-memory stage each warp fills with coalesced loads (set_quant_gemv_staged_enabled).
//     Weights not aligned for the unit loads, or x too long for shared
//     memory, take the prefill path.
//   larger m (prefill): row blocks of the weight are dequantized to a bf16 scratch and multiplied by
//     cuBLAS with x rounded to bf16 (f32 accumulation), as the bf16 linear does.
// Dequantization on the GPU rounds each product separately in the reference order (no FMA
// contraction), so dequantize_rows gives the CPU reference's bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemv_fusion.h"

namespace rlm::cuda {

inline constexpr int64_t kQuantGemvMaxRows = 8;
inline constexpr int64_t kQuantFusedMaxRows = 2;  // quant_linear_fused's rows of x

// out[i, j] = sum_k x[i, k] * dequant(weight)[j, k] (+ bias[j]).
//   x: f32 [m, k] (row stride ldx); weight: n rows of w_row_bytes bytes of blocks of weight_dtype
//   (k a whole number of blocks); bias: [n] f32/bf16/f16 or nullptr; out: f32 [m, n] (row stride ldo).
void quant_linear(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                  DType weight_dtype, int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype, float* out,
                  int64_t ldo);

// quant_linear's decode GEMV with the fusions of f (gemv_fusion.h): out [m, n] (or [m, n / 2]
// with f.silu_and_mul) written or, with f.accumulate, added to; the dot products are the unfused
// GEMV's, in the same order. Runs and returns true when the GEMV applies (1 <= m <= 8, the weight
// aligned for its unit loads, x fits in shared memory, n even for SiLU-and-mul), else returns
// false having launched nothing.
bool quant_linear_fused(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                        DType weight_dtype, int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype,
                        float* out, int64_t ldo, const GemvFusion& f);

// Whether Q4_K / Q5_K decode GEMVs take the paired-group kernel where it applies (the default) or
// the one-group kernel of the other types (for benchmarks and tests comparing the two).
void set_quant_gemv_pairs_enabled(bool enabled);
bool quant_gemv_pairs_enabled();

// Whether the decode GEMVs of Q8_0, Q3_K and Q6_K (2-byte-aligned blocks) copy each warp's next
// units of the weight row into shared memory with coalesced 16-byte loads and unpack them there (the default;
// RADIXLM_QUANT_GEMV_STAGED=0 at start-up turns it off), or each lane loads its own unit with 16-bit loads
// (for benchmarks and tests comparing the two).
void set_quant_gemv_staged_enabled(bool enabled);
bool quant_gemv_staged_enabled();

// Decode GEMVs (unfused) whose x holds at least this many values (m * k) quantize it once per
// launch in a kernel of their own, which every block then copies, instead of every block
// quantizing all of x (docs/perf/quant_gemv.md). RADIXLM_QUANT_GEMV_PREQ_MIN sets the start-up
// value; the setter is for tests and benchmarks comparing the two prologues (bit-identical).
inline constexpr int64_t kQuantGemvPrequantizeMin = 8192;
void set_quant_gemv_prequantize_min(int64_t values);
int64_t quant_gemv_prequantize_min();

// out[i, :] = dequant(weight row ids[i]) (ids: i32 with stride ids_stride, or nullptr for rows
// 0..num_rows-1), in out_dtype (f32/bf16/f16) with row stride ldo. An id outside [0, vocab_size) is
// an error (deferred inside a ModelRunner step: recorded, row left unwritten; see index_check.h).
void dequantize_rows(int device, const void* weight, DType weight_dtype, size_t w_row_bytes, int64_t vocab_size,
                     const int32_t* ids, int64_t ids_stride, int64_t num_rows, int64_t k, void* out, DType out_dtype,
                     int64_t ldo);

}  // namespace rlm::cuda
