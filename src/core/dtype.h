// Element types, the 16-bit float formats (bf16, f16) and FP8 E4M3 with exact conversions.
//
// kF8E4M3 is OCP FP8 E4M3 ("e4m3fn", PyTorch's float8_e4m3fn): 1 sign, 4 exponent (bias 7) and 3
// mantissa bits, no infinities, NaN = S.1111.111, largest finite +-448, smallest subnormal 2^-9.
// It holds FP8 weights (with scale tensors beside them, ops::linear) and FP8 KV caches (with
// per-layer scales, KVPool); a plain 1-byte element type.
//
// Besides plain element types, DType names ggml's block-quantized formats (GGUF weights kept as
// they are in the file): a tensor of such a dtype has its logical shape ([out_features,
// in_features] for a weight) while its storage holds the raw blocks, `dtype_block_size` elements
// in `dtype_block_bytes` bytes, along the last dimension (which must be a whole number of
// blocks). Layouts: formats/gguf_dequant.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/status.h"

namespace rlm {

enum class DType : uint8_t {
  kF32, kF16, kBF16, kI32, kI64, kU8, kI8, kF8E4M3,
  // Block-quantized (ggml layouts): 32-element blocks, then 256-element K-quant super-blocks.
  kQ8_0, kQ4_0, kQ4_1, kQ5_0, kQ5_1, kIQ4_NL,
  kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kIQ4_XS,
};

// Bytes per element of a plain dtype; fails for a block-quantized one (use dtype_nbytes).
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", "f8e4m3", "q4_k", ...
StatusOr<DType> parse_dtype(std::string_view name);  // accepts our names and "float32"/"bfloat16"/"Q4_K"/...
bool is_floating(DType dtype);  // f32, f16, bf16 (the activation/weight float types; not fp8)
bool is_quantized(DType dtype);            // a block-quantized dtype (not fp8, a plain 1-byte type)
int64_t dtype_block_size(DType dtype);     // elements per block (1 for plain dtypes)
size_t dtype_block_bytes(DType dtype);     // bytes per block (dtype_size for plain dtypes)
// Bytes of `numel` elements; for a block dtype `numel` must be a whole number of blocks.
size_t dtype_nbytes(DType dtype, int64_t numel);

// bfloat16: the upper 16 bits of an IEEE float32.
struct bf16 {
  uint16_t bits;
};
// IEEE 754 binary16.
struct f16 {
  uint16_t bits;
};

inline float bf16_to_f32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, NaN stays NaN (matches torch's float->bfloat16).
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding_bias) >> 16)};
}

float f16_to_f32(f16 v);
f16 f32_to_f16(float f);  // round to nearest even, overflow to inf

// FP8 E4M3 (see the top of this file), one byte.
struct f8e4m3 {
  uint8_t bits;
};
inline constexpr float kF8E4M3Max = 448.0f;
// Exact (every code is an f32 value); 0x7f / 0xff are NaN.
float f8e4m3_to_f32(f8e4m3 v);
// Round to nearest even, saturating: |f| beyond 448 (infinities included) gives +-448 (the
// `satfinite` conversion of CUDA's __nv_cvt_float_to_fp8 and what vLLM's quantization does by
// clamping first); NaN gives NaN (0x7f with the sign of f).
f8e4m3 f32_to_f8e4m3(float f);

inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return bf16_to_f32(v); }
inline float to_f32(f16 v) { return f16_to_f32(v); }
inline float to_f32(f8e4m3 v) { return f8e4m3_to_f32(v); }

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<f16> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<f8e4m3> {
  static constexpr DType value = DType::kF8E4M3;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};

// Converts `n` elements of `src` (of dtype `src_dtype`) into float32.
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n);
// Converts `n` float32 values into `dst_dtype`.
void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n);

}  // namespace rlm
