#include "core/dtype.h"

#include <cctype>
#include <cmath>
#include <string>

#include "core/check.h"

namespace rlm {

namespace {

struct DTypeInfo {
  const char* name;
  int64_t block_size;  // elements per block (1: a plain element type)
  size_t block_bytes;  // bytes per block
  bool floating;
};

// Indexed by DType. Block geometries are ggml's (formats/gguf_dequant.h describes the layouts).
constexpr DTypeInfo kInfo[] = {
    {"f32", 1, 4, true},      {"f16", 1, 2, true},      {"bf16", 1, 2, true},     {"i32", 1, 4, false},
    {"i64", 1, 8, false},     {"u8", 1, 1, false},      {"i8", 1, 1, false},      {"f8e4m3", 1, 1, false},
    {"q8_0", 32, 34, false},
    {"q4_0", 32, 18, false},  {"q4_1", 32, 20, false},  {"q5_0", 32, 22, false},  {"q5_1", 32, 24, false},
    {"iq4_nl", 32, 18, false}, {"q2_k", 256, 84, false}, {"q3_k", 256, 110, false}, {"q4_k", 256, 144, false},
    {"q5_k", 256, 176, false}, {"q6_k", 256, 210, false}, {"iq4_xs", 256, 136, false},
};
constexpr size_t kNumDTypes = sizeof(kInfo) / sizeof(kInfo[0]);
static_assert(kNumDTypes == static_cast<size_t>(DType::kIQ4_XS) + 1, "kInfo must list every DType");

const DTypeInfo& info(DType dtype) {
  const auto i = static_cast<size_t>(dtype);
  if (i >= kNumDTypes) fail(str("invalid dtype ", i));
  return kInfo[i];
}

}  // namespace

size_t dtype_size(DType dtype) {
  const DTypeInfo& d = info(dtype);
  if (d.block_size != 1) {
    fail(str("dtype_size(", d.name, "): a block-quantized dtype has no per-element size (use dtype_nbytes)"));
  }
  return d.block_bytes;
}

const char* dtype_name(DType dtype) {
  const auto i = static_cast<size_t>(dtype);
  return i < kNumDTypes ? kInfo[i].name : "invalid";
}

StatusOr<DType> parse_dtype(std::string_view name) {
  if (name == "f32" || name == "float32" || name == "float" || name == "F32") return DType::kF32;
  if (name == "f16" || name == "float16" || name == "half" || name == "F16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16" || name == "BF16") return DType::kBF16;
  if (name == "i32" || name == "int32" || name == "I32") return DType::kI32;
  if (name == "i64" || name == "int64" || name == "I64") return DType::kI64;
  if (name == "u8" || name == "uint8" || name == "U8") return DType::kU8;
  if (name == "i8" || name == "int8" || name == "I8") return DType::kI8;
  if (name == "f8e4m3" || name == "float8_e4m3fn" || name == "F8_E4M3" || name == "fp8_e4m3") return DType::kF8E4M3;
  // Block-quantized: our lower-case names or ggml's ("Q4_K").
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (size_t i = static_cast<size_t>(DType::kQ8_0); i < kNumDTypes; ++i) {
    if (lower == kInfo[i].name) return static_cast<DType>(i);
  }
  return invalid_argument(str("unknown dtype '", name, "'"));
}

bool is_floating(DType dtype) { return info(dtype).floating; }

bool is_quantized(DType dtype) { return info(dtype).block_size != 1; }

int64_t dtype_block_size(DType dtype) { return info(dtype).block_size; }

size_t dtype_block_bytes(DType dtype) { return info(dtype).block_bytes; }

size_t dtype_nbytes(DType dtype, int64_t numel) {
  const DTypeInfo& d = info(dtype);
  RLM_CHECK(numel >= 0 && numel % d.block_size == 0)
      << numel << " elements of " << d.name << " are not a whole number of " << d.block_size << "-element blocks";
  return static_cast<size_t>(numel / d.block_size) * d.block_bytes;
}

float f16_to_f32(f16 v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: scale into the subnormal range
    float a;
    std::memcpy(&a, &abs, 4);
    // 2^-24 is the smallest f16 subnormal; rint rounds half to even in the default mode.
    const float scaled = a * 16777216.0f;
    return f16{static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)))};
  }
  // Normal: rebias exponent, round mantissa to 10 bits, nearest even.
  uint32_t mant_rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  uint32_t h = (mant_rounded >> 13) - ((127u - 15u) << 10);
  return f16{static_cast<uint16_t>(sign | h)};
}

float f8e4m3_to_f32(f8e4m3 v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x80u) << 24;
  const uint32_t exp = (v.bits >> 3) & 0xfu;
  const uint32_t mant = v.bits & 0x7u;
  uint32_t u;
  if (exp == 0xfu && mant == 0x7u) {
    u = sign | 0x7fc00000u;  // NaN
  } else if (exp == 0) {
    // Subnormal (or zero): mant * 2^-9, exact in f32.
    const float f = static_cast<float>(mant) * 0.001953125f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((exp + 127 - 7) << 23) | (mant << 20);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f8e4m3 f32_to_f8e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f8e4m3{static_cast<uint8_t>(sign | 0x7fu)};  // NaN
  // 448 = 0x43e00000; values rounding above it (and infinities) saturate to 448 = 0x7e.
  if (abs >= 0x43e00000u) return f8e4m3{static_cast<uint8_t>(sign | 0x7eu)};
  if (abs < 0x3c800000u) {
    // Below 2^-6, the smallest normal: a multiple of 2^-9. |f| * 2^9 < 8 is exact in f32, and
    // nearbyint rounds half to even in the default rounding mode.
    float a;
    std::memcpy(&a, &abs, 4);
    const auto m = static_cast<uint32_t>(std::nearbyint(a * 512.0f));  // 0..8 (8 = the smallest normal)
    return f8e4m3{static_cast<uint8_t>(sign | m)};
  }
  // Normal: round the 23-bit mantissa to 3 bits, nearest even, then rebias the exponent (a carry
  // out of the mantissa bumps the exponent, which stays <= 448 thanks to the check above).
  const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t e = ((rounded >> 23) & 0xffu) - 127 + 7;
  const uint32_t m = (rounded >> 20) & 0x7u;
  return f8e4m3{static_cast<uint8_t>(sign | (e << 3) | m)};
}

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n) {
  switch (src_dtype) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      const auto* s = static_cast<const bf16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const f16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const f8e4m3*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f8e4m3_to_f32(s[i]);
      return;
    }
    default: fail(str("convert_to_f32: unsupported source dtype ", dtype_name(src_dtype)));
  }
}

void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n) {
  switch (dst_dtype) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      auto* d = static_cast<bf16*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<f16*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* d = static_cast<f8e4m3*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f8e4m3(src[i]);
      return;
    }
    default: fail(str("convert_from_f32: unsupported destination dtype ", dtype_name(dst_dtype)));
  }
}

}  // namespace rlm
