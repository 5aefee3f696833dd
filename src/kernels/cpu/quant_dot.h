// Integer dot products between GGUF block-quantized weight rows and activation rows quantized to
// 8 bits per block (the CPU side of the quantized linear; quant_matmul.h drives them).
//
// Activations: each row of x is cut into blocks of `block` values and quantized symmetrically,
// d = max|x| / 127, q = round(x / d) in [-127, 127] (ggml's Q8_0 / Q8_K activation blocks):
//   32-element blocks for weights with 32-element blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL),
//     with sum = d * (sum of the block's q) for the weights' offsets and minimums;
//   256-element blocks for the K-quants and IQ4_XS, with the int16 sum of every 16 q's.
// A weight block times an activation block is an exact integer sum of q_w * q_a, scaled once by
// the blocks' float scales; the only approximation is the activations' 8-bit rounding.
//
// Kernels: a portable scalar one per type (the reference for the SIMD ones), AVX2 and AVX-512
// (F/BW/VL + VNNI) ones compiled with target attributes and chosen at run time from cpuid, so one
// binary runs on any x86-64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace rlm::cpu {

enum class CpuIsa { kScalar, kAvx2, kAvx512 };  // kAvx512: AVX-512 F, BW, VL and VNNI (+ AVX2)
CpuIsa best_cpu_isa();                // what this CPU runs (cpuid, once); RADIXLM_CPU_ISA=scalar|avx2 caps it
bool cpu_supports(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512"

// Activation block size the integer kernels of `weight_dtype` take: 32 or 256.
int64_t activation_block(DType weight_dtype);

// m rows of k activations quantized for the integer kernels.
struct Q8Activations {
  int64_t m = 0, k = 0, block = 32;
  std::vector<int8_t> q;       // [m, k]
  std::vector<float> d;        // [m, k / block] scales
  std::vector<float> sum;      // block 32: [m, k / 32] d * sum(q) of each block
  std::vector<int16_t> bsums;  // block 256: [m, k / 16] sum(q) of every 16 values
  // The scales again, block-major per group of 4 rows (zero-padded): [ceil(m / 4), k / block, 4],
  // so a kernel loads the 4 rows' scales of a block at once.
  std::vector<float> d4;

  const int8_t* row_q(int64_t r) const { return q.data() + r * k; }
  const float* row_d(int64_t r) const { return d.data() + r * (k / block); }
  const float* row_sum(int64_t r) const { return sum.data() + r * (k / 32); }
  const int16_t* row_bsums(int64_t r) const { return bsums.data() + r * (k / 16); }
  const float* group_d4(int64_t r) const { return d4.data() + (r / 4) * (k / block) * 4; }
};

// Quantizes x (f32 [m, k], row stride ldx; k a multiple of `block`) into `out` (resized).
void quantize_activations(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx, int64_t block,
                          Q8Activations* out);

// The most activation rows one kernel call handles (a register tile of weight row x rows).
inline constexpr int kMaxDotRows = 4;

// out[r * ldo + j] = dot(weight row j, activation row r0 + r) for j in [0, n), r in [0, nr),
// nr <= kMaxDotRows, r0 a multiple of kMaxDotRows. w: n rows of `w_row_bytes` bytes of blocks of `wtype` (a block dtype);
// `a` quantized with activation_block(wtype).
void quant_dot_rows(CpuIsa isa, DType wtype, const uint8_t* w, size_t w_row_bytes, int64_t n,
                    const Q8Activations& a, int64_t r0, int nr, float* out, int64_t ldo);

// ---- batches: weight rows unpacked once for many activation rows ----
// A batch runs every weight block once per group of kMaxDotRows activation rows; quant_matmul
// unpacks a tile of weight rows once (values as bytes, scales as floats) and runs every
// group of the pass over it. The unpacked kernels do the same arithmetic on the same values as
// quant_dot_rows: the same bits.

// Bytes of one unpacked weight row of k values; 0 where `isa` has no unpacked kernel for `wtype`
// (the scalar kernels; Q8_0, whose blocks are bytes already; the K-quants and IQ4_XS, whose
// super-blocks unpack cheaply per group).
size_t unpacked_row_bytes(CpuIsa isa, DType wtype, int64_t k);
// n weight rows (w_row_bytes apart) of k values -> out, unpacked_row_bytes(isa, wtype, k) apart.
void quant_unpack_rows(CpuIsa isa, DType wtype, const uint8_t* w, size_t w_row_bytes, int64_t n, int64_t k,
                       uint8_t* out);
// quant_dot_rows over n rows unpacked by quant_unpack_rows.
void quant_dot_unpacked_rows(CpuIsa isa, DType wtype, const uint8_t* wu, int64_t n, const Q8Activations& a,
                             int64_t r0, int nr, float* out, int64_t ldo);

// ---- kernel table (implementations in quant_dot.cpp and quant_dot_x86.cpp) ----

// Activation rows as the kernels read them: row r of q at q + r * k, etc.
struct Q8View {
  const int8_t* q;
  const float* d;
  const float* sum;
  const int16_t* bsums;
  const float* d4;  // the 4-row group's scales, block-major (Q8Activations::d4)
  int64_t k;
};
using QuantDotFn = void (*)(const uint8_t* w, size_t w_row_bytes, int64_t n, const Q8View& a, int nr, float* out,
                            int64_t ldo);
QuantDotFn scalar_dot_kernel(DType wtype);
QuantDotFn avx2_dot_kernel(DType wtype);    // nullptr when not built for x86
QuantDotFn avx512_dot_kernel(DType wtype);  // nullptr when not built for x86
QuantDotFn avx2_unpacked_dot_kernel(DType wtype);    // over unpacked rows; nullptr: none
QuantDotFn avx512_unpacked_dot_kernel(DType wtype);  // over unpacked rows; nullptr: none
// n rows of nb blocks (ldw bytes apart) -> n rows of nb unpacked blocks of *block_bytes each.
using UnpackFn = void (*)(const uint8_t* w, size_t ldw, int64_t n, int64_t nb, uint8_t* out);
UnpackFn x86_unpack_fn(DType wtype, size_t* block_bytes);  // nullptr (block_bytes 0): none
void quantize_row_q8_avx2(const float* x, int64_t k, int64_t block, int8_t* q, float* d, float* sum, int16_t* bsums);

}  // namespace rlm::cpu
