// Dequantization of GGUF tensor data into float32, with ggml's block layouts. This is the
// reference path (bit-exact with the `gguf` package's numpy dequantizer): the quantized matmul
// kernels are tested against it, and it serves where a tensor must be float (embedding rows,
// norms, the f32-activation mode of the quantized linear).
//
// Layouts (little-endian; f16 = IEEE half; "nibble j" is the low nibble of qs[j] for j < 16 and
// the high nibble of qs[j - 16] otherwise):
//   F32, F16, BF16                plain elements
//   Q8_0   (32 in 34 B)   f16 d, i8 q[32]                                  x = d * q
//   Q4_0   (32 in 18 B)   f16 d, u8 qs[16]                                 x = d * (nibble - 8)
//   Q4_1   (32 in 20 B)   f16 d, f16 m, u8 qs[16]                          x = d * nibble + m
//   Q5_0   (32 in 22 B)   f16 d, u32 qh, u8 qs[16]                         x = d * (q - 16)
//   Q5_1   (32 in 24 B)   f16 d, f16 m, u32 qh, u8 qs[16]                  x = d * q + m
//                         (Q5: q = nibble j | bit j of qh << 4)
//   IQ4_NL (32 in 18 B)   f16 d, u8 qs[16]                                 x = d * kIq4nlValues[nibble]
// K-quants: 256-element super-blocks of 16 or 32-element sub-blocks (e = element index):
//   Q2_K   (256 in 84 B)  u8 scales[16], u8 qs[64], f16 d, f16 dmin
//          q = qs[32*(e/128) + e%32] >> 2*((e/32)%4) & 3; s = scales[e/16]
//          x = (d * (s & 15)) * q - dmin * (s >> 4)
//   Q3_K   (256 in 110 B) u8 hmask[32], u8 qs[64], u8 scales[12], f16 d
//          q = (qs as Q2_K) - (bit e/32 of hmask[e%32] ? 0 : 4); 16 6-bit scales s (low 4 bits:
//          nibbles of scales[0..7], sub-blocks 0-7 low nibbles, 8-15 high; high 2 bits:
//          scales[8 + i%4] >> 2*(i/4)); x = (d * (s - 32)) * q
//   Q4_K   (256 in 144 B) f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//          eight 6-bit (scale, min) pairs for 32-element sub-blocks b (b < 4: scales[b] & 63,
//          scales[b+4] & 63; else (scales[b+4] & 15) | (scales[b-4] >> 6) << 4, (scales[b+4] >> 4)
//          | (scales[b] >> 6) << 4); q = qs[32*(b/2) + e%32] >> 4*(b%2) & 15
//          x = (d * sc) * q - dmin * m
//   Q5_K   (256 in 176 B) f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//          as Q4_K with q |= (bit b of qh[e%32]) << 4
//   Q6_K   (256 in 210 B) u8 ql[128], u8 qh[64], i8 scales[16], f16 d
//          q = (ql[64*(e/128) + e%64] >> 4*((e/64)%2) & 15) | (qh[32*(e/128) + e%32] >>
//          2*((e/32)%4) & 3) << 4; x = (d * scales[e/16]) * (q - 32)
//   IQ4_XS (256 in 136 B) f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]
//          sub-block b: s = (scales_l[b/2] >> 4*(b%2) & 15) | (scales_h >> 2b & 3) << 4;
//          q = nibble (e%32) of qs[16b .. 16b+16); x = (d * (s - 32)) * kIq4nlValues[q]
// Every other ggml type (Q8_1, Q8_K, IQ1..IQ3, TQ*, MXFP4, integer types) is recognised and
// rejected with kUnimplemented.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/gguf.h"

namespace rlm {

// IQ4_NL / IQ4_XS non-linear 4-bit codebook.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The DType holding a ggml type as it is stored (F32/F16/BF16 and the block types above);
// nullopt for the other ggml types.
std::optional<DType> dtype_of_ggml_type(GgmlType type);
bool gguf_can_dequantize(GgmlType type);

// Dequantizes `numel` elements stored as `type` in `data` into `out` (`numel` floats).
// kUnimplemented for unsupported types; kInvalidArgument when `numel` is not a whole number of
// blocks or `data` does not hold exactly that many blocks.
Status dequantize_to_f32(GgmlType type, std::span<const uint8_t> data, int64_t numel, float* out);

// Tensor `info` of `file` as a new f32 CPU tensor of shape info.shape. Errors name the tensor.
StatusOr<Tensor> dequantize_tensor(const GgufFile& file, const GgufTensorInfo& info);

// `n` elements of `dtype` (float or block-quantized; n a whole number of blocks) into f32.
void dequantize_row(DType dtype, const void* src, float* out, int64_t n);

// A CPU tensor of a float or block-quantized dtype as a new contiguous f32 tensor (any row
// stride; the last dimension contiguous).
Tensor dequantize(const Tensor& t);

// Fills `num_blocks` blocks of a block-quantized `dtype` with random quants and scales such that
// the values lie within about +-`scale` (deterministic in `seed`). For tests and dummy weights.
void fill_random_blocks(DType dtype, void* blocks, int64_t num_blocks, uint64_t seed, float scale);

}  // namespace rlm
