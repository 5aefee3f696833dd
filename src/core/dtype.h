// Element types and the 16-bit float formats (bf16, f16) with exact conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/status.h"

namespace rlm {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kI8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32", "bf16", ...
StatusOr<DType> parse_dtype(std::string_view name);  // accepts our names and "float32"/"bfloat16"/...
bool is_floating(DType dtype);

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

inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return bf16_to_f32(v); }
inline float to_f32(f16 v) { return f16_to_f32(v); }

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
