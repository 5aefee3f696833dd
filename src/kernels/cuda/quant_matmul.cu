#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/cuda_check.h"
#include "core/env.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/gemv.cuh"
#include "kernels/cuda/gemv_fusion.cuh"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/quant_matmul.h"

namespace rlm::cuda {
namespace {

__constant__ int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

__device__ __forceinline__ int nib(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

// The reference's float operations, rounded one by one (no FMA contraction).
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

__device__ __forceinline__ void k_scale_min(const uint8_t* s, int b, int* sc, int* m) {
  if (b < 4) {
    *sc = s[b] & 63;
    *m = s[b + 4] & 63;
  } else {
    *sc = (s[b + 4] & 15) | (s[b - 4] >> 6) << 4;
    *m = (s[b + 4] >> 4) | (s[b] >> 6) << 4;
  }
}

// Values 32c .. 32c+31 of a weight row (chunk c: a 32-element block, or group c % 8 of super-block
// c / 8), in the reference dequantization's arithmetic (formats/gguf_dequant.cpp).
template <DType T>
__device__ __forceinline__ void dequant_chunk(const uint8_t* row, int64_t c, float* v) {
  if constexpr (T == DType::kQ8_0) {
    const uint8_t* b = row + c * 34;
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) v[j] = mul(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
  } else if constexpr (T == DType::kQ4_0) {
    const uint8_t* b = row + c * 18;
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) v[j] = mul(d, static_cast<float>(nib(b + 2, j) - 8));
  } else if constexpr (T == DType::kQ4_1) {
    const uint8_t* b = row + c * 20;
    const float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 32; ++j) v[j] = add(mul(d, static_cast<float>(nib(b + 4, j))), m);
  } else if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
    constexpr int kBytes = T == DType::kQ5_0 ? 22 : 24, kOff = T == DType::kQ5_0 ? 2 : 4;
    const uint8_t* b = row + c * kBytes;
    const float d = f16_at(b), m = T == DType::kQ5_1 ? f16_at(b + 2) : 0.0f;
    const uint32_t qh = b[kOff] | b[kOff + 1] << 8 | b[kOff + 2] << 16 | static_cast<uint32_t>(b[kOff + 3]) << 24;
    for (int j = 0; j < 32; ++j) {
      const int q = nib(b + kOff + 4, j) | static_cast<int>((qh >> j) & 1u) << 4;
      v[j] = T == DType::kQ5_0 ? mul(d, static_cast<float>(q - 16)) : add(mul(d, static_cast<float>(q)), m);
    }
  } else if constexpr (T == DType::kIQ4_NL) {
    const uint8_t* b = row + c * 18;
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) v[j] = mul(d, static_cast<float>(kIq4nl[nib(b + 2, j)]));
  } else if constexpr (T == DType::kQ2_K) {
    const uint8_t* b = row + (c / 8) * 84;
    const int g = static_cast<int>(c % 8);
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int j = 0; j < 32; ++j) {
      const int q = b[16 + 32 * (g / 4) + j] >> (2 * (g % 4)) & 3;
      const uint8_t s = b[2 * g + j / 16];
      v[j] = sub(mul(mul(d, static_cast<float>(s & 15)), static_cast<float>(q)), mul(dmin, static_cast<float>(s >> 4)));
    }
  } else if constexpr (T == DType::kQ3_K) {
    const uint8_t* b = row + (c / 8) * 110;
    const int g = static_cast<int>(c % 8);
    const uint8_t* s = b + 96;
    const float d = f16_at(b + 108);
    for (int j = 0; j < 32; ++j) {
      const int i = 2 * g + j / 16;
      const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
      const int scale = (low | (s[8 + i % 4] >> (2 * (i / 4)) & 3) << 4) - 32;
      const int q = (b[32 + 32 * (g / 4) + j] >> (2 * (g % 4)) & 3) - ((b[j] >> g & 1) ? 0 : 4);
      v[j] = mul(mul(d, static_cast<float>(scale)), static_cast<float>(q));
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    constexpr int kBytes = T == DType::kQ4_K ? 144 : 176, kQs = T == DType::kQ4_K ? 16 : 48;
    const uint8_t* b = row + (c / 8) * kBytes;
    const int g = static_cast<int>(c % 8);
    int sc, m;
    k_scale_min(b + 4, g, &sc, &m);
    const float dl = mul(f16_at(b), static_cast<float>(sc)), ml = mul(f16_at(b + 2), static_cast<float>(m));
    for (int j = 0; j < 32; ++j) {
      int q = b[kQs + 32 * (g / 2) + j] >> (4 * (g % 2)) & 15;
      if (T == DType::kQ5_K) q |= (b[16 + j] >> g & 1) << 4;
      v[j] = sub(mul(dl, static_cast<float>(q)), ml);
    }
  } else if constexpr (T == DType::kQ6_K) {
    const uint8_t* b = row + (c / 8) * 210;
    const float d = f16_at(b + 208);
    for (int j = 0; j < 32; ++j) {
      const int e = static_cast<int>(c % 8) * 32 + j;
      const int low = b[64 * (e / 128) + e % 64] >> (4 * ((e / 64) % 2)) & 15;
      const int high = b[128 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
      const float dl = mul(d, static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
      v[j] = mul(dl, static_cast<float>((low | high << 4) - 32));
    }
  } else if constexpr (T == DType::kIQ4_XS) {
    const uint8_t* b = row + (c / 8) * 136;
    const int g = static_cast<int>(c % 8);
    const int sh = b[2] | b[3] << 8;
    const int s = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | ((sh >> (2 * g)) & 3) << 4;
    const float dl = mul(f16_at(b), static_cast<float>(s - 32));
    for (int j = 0; j < 32; ++j) v[j] = mul(dl, static_cast<float>(kIq4nl[nib(b + 8 + 16 * g, j)]));
  }
}

// ---- decode GEMV (m <= kQuantGemvMaxRows) -------------------------------------------------------
//
// Each block quantizes the m rows of x into shared memory once (32-value blocks: int8 q, scale d,
// d * sum(q); the CPU's quantize_activations arithmetic, bit for bit), then its warps take weight
// rows in turn (grid-stride). Lane l of a warp takes the 32-value units l, l + 32, ... of the row
// (a block of a 32-block type, one 32-value group of a K-quant super-block): it loads the unit's
// quants as 32-bit words, unpacks them to 8 words of 4 signed bytes, and multiplies them with the
// activation words by __dp4a, one exact integer sum per unit (two for 16-value scales) scaled in f32.

constexpr int kQWarps = 8;  // warps (weight rows in flight) per block
constexpr int kQThreads = kQWarps * 32;

__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) { return ld16(p) | ld16(p + 2) << 16; }  // 2-aligned

// Bytes of alignment the unit loads of type T need (of the weight pointer and the row stride).
template <DType T>
constexpr size_t unit_align() {
  if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) return 16;
  if constexpr (T == DType::kQ4_1 || T == DType::kQ5_1 || T == DType::kQ2_K || T == DType::kIQ4_XS) return 4;
  return 2;
}

// Bit i of the low 4 bits of b to bit 4 of byte i.
__device__ __forceinline__ uint32_t bits_to_b4(uint32_t b) {
  return (b & 1u) << 4 | (b & 2u) << 11 | (b & 4u) << 18 | (b & 8u) << 25;
}

constexpr uint32_t pack4(int8_t a, int8_t b, int8_t c, int8_t d) {
  return static_cast<uint8_t>(a) | static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24;
}

// The IQ4_NL codebook entries of 4 bytes holding indices 0..15, by byte permutes of the table.
__device__ __forceinline__ uint32_t iq4nl_lookup(uint32_t q) {
  constexpr uint32_t t0 = pack4(-127, -104, -83, -65), t1 = pack4(-49, -35, -22, -10), t2 = pack4(1, 13, 25, 38),
                     t3 = pack4(53, 69, 89, 113);
  const uint32_t sel = (q & 0x7u) | (q >> 4 & 0x70u) | (q >> 8 & 0x700u) | (q >> 12 & 0x7000u);
  const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
  const uint32_t h = q & 0x08080808u;
  return __byte_perm(lo, hi, 0x3210u | (h >> 1 & 0x4u) | (h >> 5 & 0x40u) | (h >> 9 & 0x400u) | (h >> 13 & 0x4000u));
}

// One 32-value unit of a weight row: v = its 32 quants as integers (4 signed bytes a word, in
// element order), with the scales that turn them into the reference's values.
struct WUnit {
  int v[8];
  float d;     // the unit's float scale (value = d * v + m); Q2_K, Q3_K, Q6_K: times s0 / s1
  int s0, s1;  // Q2_K, Q3_K, Q6_K: integer scales of values 0..15 and 16..31
  float m;     // Q4_1, Q5_1, Q4_K, Q5_K: the unit's offset; Q2_K: dmin
  int m0, m1;  // Q2_K: integer minimums of the halves (value = d * s * v - dmin * m)
};

template <DType T>
constexpr bool kHalfScales = T == DType::kQ2_K || T == DType::kQ3_K || T == DType::kQ6_K;
template <DType T>
constexpr bool kMinSum = T == DType::kQ4_1 || T == DType::kQ5_1 || T == DType::kQ4_K || T == DType::kQ5_K;

// Unit u (values 32u .. 32u+31) of a weight row; the unpacking mirrors formats/gguf_dequant.h.
template <DType T>
__device__ __forceinline__ void load_unit(const uint8_t* row, int64_t u, WUnit& o) {
  if constexpr (T == DType::kQ8_0) {
    const uint8_t* b = row + u * 34;
    o.d = f16_at(b);
#pragma unroll
    for (int i = 0; i < 8; ++i) o.v[i] = static_cast<int>(ld32_a2(b + 2 + 4 * i));
  } else if constexpr (T == DType::kQ4_0 || T == DType::kIQ4_NL) {
    const uint8_t* b = row + u * 18;
    o.d = f16_at(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32_a2(b + 2 + 4 * i);
      if constexpr (T == DType::kQ4_0) {
        o.v[i] = static_cast<int>(__vsub4(q & 0x0f0f0f0fu, 0x08080808u));
        o.v[4 + i] = static_cast<int>(__vsub4(q >> 4 & 0x0f0f0f0fu, 0x08080808u));
      } else {
        o.v[i] = static_cast<int>(iq4nl_lookup(q & 0x0f0f0f0fu));
        o.v[4 + i] = static_cast<int>(iq4nl_lookup(q >> 4 & 0x0f0f0f0fu));
      }
    }
  } else if constexpr (T == DType::kQ4_1) {
    const uint8_t* b = row + u * 20;
    o.d = f16_at(b);
    o.m = f16_at(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32(b + 4 + 4 * i);
      o.v[i] = static_cast<int>(q & 0x0f0f0f0fu);
      o.v[4 + i] = static_cast<int>(q >> 4 & 0x0f0f0f0fu);
    }
  } else if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
    constexpr int kBytes = T == DType::kQ5_0 ? 22 : 24, kOff = T == DType::kQ5_0 ? 2 : 4;
    const uint8_t* b = row + u * kBytes;
    o.d = f16_at(b);
    uint32_t qh;
    if constexpr (T == DType::kQ5_1) {
      o.m = f16_at(b + 2);
      qh = ld32(b + kOff);
    } else {
      qh = ld32_a2(b + kOff);
    }
    constexpr uint32_t kSub = T == DType::kQ5_0 ? 0x10101010u : 0u;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = T == DType::kQ5_1 ? ld32(b + kOff + 4 + 4 * i) : ld32_a2(b + kOff + 4 + 4 * i);
      o.v[i] = static_cast<int>(__vsub4((q & 0x0f0f0f0fu) | bits_to_b4(qh >> (4 * i)), kSub));
      o.v[4 + i] = static_cast<int>(__vsub4((q >> 4 & 0x0f0f0f0fu) | bits_to_b4(qh >> (16 + 4 * i)), kSub));
    }
  } else if constexpr (T == DType::kQ2_K) {
    const uint8_t* b = row + (u / 8) * 84;
    const int g = static_cast<int>(u % 8);
    o.d = f16_at(b + 80);
    o.m = f16_at(b + 82);
    const int s0 = b[2 * g], s1 = b[2 * g + 1];
    o.s0 = s0 & 15, o.s1 = s1 & 15, o.m0 = s0 >> 4, o.m1 = s1 >> 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) o.v[i] = static_cast<int>(ld32(b + 16 + 32 * (g / 4) + 4 * i) >> (2 * (g % 4)) & 0x03030303u);
  } else if constexpr (T == DType::kQ3_K) {
    const uint8_t* b = row + (u / 8) * 110;
    const int g = static_cast<int>(u % 8);
    const uint8_t* s = b + 96;
    o.d = f16_at(b + 108);
    int sc[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 2 * g + h;
      const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
      sc[h] = (low | (s[8 + i % 4] >> (2 * (i / 4)) & 3) << 4) - 32;
    }
    o.s0 = sc[0], o.s1 = sc[1];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t low = ld32_a2(b + 32 + 32 * (g / 4) + 4 * i) >> (2 * (g % 4)) & 0x03030303u;
      const uint32_t high = ld32_a2(b + 4 * i) >> g & 0x01010101u;
      o.v[i] = static_cast<int>(__vsub4(low | high << 2, 0x04040404u));
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    constexpr int kBytes = T == DType::kQ4_K ? 144 : 176, kQs = T == DType::kQ4_K ? 16 : 48;
    const uint8_t* b = row + (u / 8) * kBytes;
    const int g = static_cast<int>(u % 8);
    int sc, mn;
    k_scale_min(b + 4, g, &sc, &mn);
    o.d = mul(f16_at(b), static_cast<float>(sc));
    o.m = -mul(f16_at(b + 2), static_cast<float>(mn));
    const uint4* qs = reinterpret_cast<const uint4*>(b + kQs + 32 * (g / 2));
    const uint4 q0 = qs[0], q1 = qs[1];
    const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    uint32_t qh[8];
    if constexpr (T == DType::kQ5_K) {
      const uint4* hp = reinterpret_cast<const uint4*>(b + 16);
      const uint4 h0 = hp[0], h1 = hp[1];
      const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) qh[i] = (hw[i] >> g & 0x01010101u) << 4;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t v = q[i] >> (4 * (g % 2)) & 0x0f0f0f0fu;
      if constexpr (T == DType::kQ5_K) v |= qh[i];
      o.v[i] = static_cast<int>(v);
    }
  } else if constexpr (T == DType::kQ6_K) {
    const uint8_t* b = row + (u / 8) * 210;
    const int g = static_cast<int>(u % 8), h = g / 4, gg = g % 4;
    o.d = f16_at(b + 208);
    o.s0 = static_cast<int8_t>(b[192 + 2 * g]);
    o.s1 = static_cast<int8_t>(b[193 + 2 * g]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t low = ld32_a2(b + 64 * h + 32 * (gg % 2) + 4 * i) >> (4 * (gg / 2)) & 0x0f0f0f0fu;
      const uint32_t high = ld32_a2(b + 128 + 32 * h + 4 * i) >> (2 * gg) & 0x03030303u;
      o.v[i] = static_cast<int>(__vsub4(low | high << 4, 0x20202020u));
    }
  } else if constexpr (T == DType::kIQ4_XS) {
    const uint8_t* b = row + (u / 8) * 136;
    const int g = static_cast<int>(u % 8);
    const int sh = static_cast<int>(ld16(b + 2));
    const int s = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | ((sh >> (2 * g)) & 3) << 4;
    o.d = mul(f16_at(b), static_cast<float>(s - 32));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld32(b + 8 + 16 * g + 4 * i);
      o.v[i] = static_cast<int>(iq4nl_lookup(q & 0x0f0f0f0fu));
      o.v[4 + i] = static_cast<int>(iq4nl_lookup(q >> 4 & 0x0f0f0f0fu));
    }
  }
}

// dot(unit, activation block): xw = the block's 8 words of int8 q, xd its scale, xs = xd * sum(q).
template <DType T>
__device__ __forceinline__ float unit_dot(const WUnit& w, const int4* xw, float xd, float xs) {
  const int4 a0 = xw[0], a1 = xw[1];
  int lo = 0, hi = 0;
  lo = __dp4a(w.v[0], a0.x, lo);
  lo = __dp4a(w.v[1], a0.y, lo);
  lo = __dp4a(w.v[2], a0.z, lo);
  lo = __dp4a(w.v[3], a0.w, lo);
  hi = __dp4a(w.v[4], a1.x, kHalfScales<T> ? 0 : lo);
  hi = __dp4a(w.v[5], a1.y, hi);
  hi = __dp4a(w.v[6], a1.z, hi);
  hi = __dp4a(w.v[7], a1.w, hi);
  if constexpr (kHalfScales<T>) {
    float r = xd * w.d * static_cast<float>(w.s0 * lo + w.s1 * hi);
    if constexpr (T == DType::kQ2_K) {
      constexpr int kOnes = 0x01010101;
      const int sl = __dp4a(kOnes, a0.w, __dp4a(kOnes, a0.z, __dp4a(kOnes, a0.y, __dp4a(kOnes, a0.x, 0))));
      const int sh = __dp4a(kOnes, a1.w, __dp4a(kOnes, a1.z, __dp4a(kOnes, a1.y, __dp4a(kOnes, a1.x, 0))));
      r -= xd * w.m * static_cast<float>(w.m0 * sl + w.m1 * sh);
    }
    return r;
  } else if constexpr (kMinSum<T>) {
    return fmaf(xd * w.d, static_cast<float>(hi), w.m * xs);
  } else {
    return xd * w.d * static_cast<float>(hi);
  }
}

// Shared memory of the GEMV for M rows of x of length k: int8 q [M, k], f32 d and d * sum [M, k/32].
constexpr size_t gemv_smem_bytes(int64_t m, int64_t k) { return static_cast<size_t>(m * k + 2 * m * (k / 32) * 4); }

// Types whose blocks are only 2-byte aligned, with many words a unit (Q8_0: 34-byte blocks, Q3_K:
// 110-byte super-blocks, Q6_K: 210): a lane reading its own unit takes 16-18 (Q8_0) to 35 (Q6_K)
// 16-bit loads, each touching a line of its own across the warp. Their GEMV stages the row
// instead: the warp copies its next units' bytes with coalesced 16-byte loads of the enclosing
// aligned words into its own stage in shared memory, and each lane unpacks its units from there
// (docs/perf/quant_gemv.md: batch 1 -7% Q8_0, -17% Q3_K, -19% Q6_K). Q4_0 (18-byte blocks, 10
// loads a unit) measured slower staged (+3.5%), so it, IQ4_NL of the same layout and Q5_0 keep the
// lanes' own loads.
template <DType T>
constexpr bool kStaged = T == DType::kQ8_0 || T == DType::kQ3_K || T == DType::kQ6_K;

// Bytes of 32 units (one a lane) of a kStaged type: 32 blocks, or 4 super-blocks of 8 units.
template <DType T>
constexpr int staged_bytes() {
  switch (T) {
    case DType::kQ8_0: return 32 * 34;
    case DType::kQ3_K: return 4 * 110;
    case DType::kQ6_K: return 4 * 210;
    default: return 0;
  }
}

// Units a lane takes from each stage: ~2 KB of the row a warp in flight (one unit a lane, ~450-1,100
// bytes, gained less for Q8_0 and lost for Q4_0 in the measurements).
template <DType T>
constexpr int kStageUnitsPerLane = kStaged<T> ? (2048 + staged_bytes<T>() - 1) / staged_bytes<T>() : 1;

// 16-byte words a lane copies per stage: the units' bytes plus up to 14 before them (the first
// word's alignment), over the warp.
template <DType T>
constexpr int kStageWords = ((kStageUnitsPerLane<T> * staged_bytes<T>() + 14 + 15) / 16 + 31) / 32;

// Shared memory of a GEMV block of type T: x quantized (gemv_smem_bytes) then, for kStaged types,
// every warp's stage from the next 16-byte boundary (stage_offset).
constexpr size_t stage_offset(int64_t m, int64_t k) { return (gemv_smem_bytes(m, k) + 15) / 16 * 16; }
template <DType T>
constexpr size_t gemv_block_smem_bytes(int64_t m, int64_t k) {
  return kStaged<T> ? stage_offset(m, k) + static_cast<size_t>(kQWarps) * kStageWords<T> * 32 * 16
                    : gemv_smem_bytes(m, k);
}

// Byte offset of value v in a row of quantized x: as stored (kPieceMajor false), or for the paired-group
// kernel with each 64-value chunk c split into four 16-value pieces w stored piece-major,
// (w * chunks + c) * 16 + v % 16, so that lanes reading piece w of consecutive chunks read
// consecutive 16 bytes (no bank conflict).
template <bool kPieceMajor>
__device__ __forceinline__ int64_t x_offset(int64_t v, int64_t k) {
  if constexpr (kPieceMajor) return ((v % 64) / 16 * (k / 64) + v / 64) * 16 + v % 16;
  return v;
}

// Rows of the weight on their way into L2 (prefetch.global.L2: no registers, no wait): lane l
// takes the 128-byte lines l, l + 32, ... of the row.
__device__ __forceinline__ void prefetch_row(const uint8_t* row, size_t row_bytes) {
  for (size_t off = static_cast<size_t>(threadIdx.x % 32) * 128; off < row_bytes; off += 32 * 128) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(row + off));
  }
}

// With the SiLU-and-mul epilogue a block takes kPairs (gate, up) row pairs at a time: warp q <
// kPairs the gate row of pair q, warp q + kPairs its up row (one row a warp, as without the
// epilogue, so the rows spread over the warps as finely), meeting in shared memory.
constexpr int kPairs = kQWarps / 2;

// The first weight row of this warp (or -1): what gemv_row_loop below gives it first.
__device__ __forceinline__ int64_t first_row(int64_t n, bool silu) {
  const int warp = threadIdx.x / 32;
  if (!silu) {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kQWarps + warp;
    return j < n ? j : -1;
  }
  const int64_t half = n / 2, p = static_cast<int64_t>(blockIdx.x) * kPairs + warp % kPairs;
  return p < half ? (warp < kPairs ? p : p + half) : -1;
}

// The 8 values of quantization task t (values (t % 4) * 8 .. + 7 of 32-value block t / 4 of the
// rows of x, row stride ldx) into v: 16-byte loads when vec (x 16-byte aligned, ldx % 4 == 0), zeros
// past the last task.
__device__ __forceinline__ void load_task(const float* __restrict__ x, int64_t k, int64_t ldx, int64_t t,
                                          int64_t tasks, bool vec, float (&v)[8]) {
  const int64_t nb = k / 32, blk = t / 4, r = blk / nb, c = (blk % nb) * 32 + (t % 4) * 8;
  const float* p = x + r * ldx + c;
  if (t >= tasks) {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = 0.0f;
  } else if (vec) {
    const float4 lo = *reinterpret_cast<const float4*>(p), hi = *reinterpret_cast<const float4*>(p + 4);
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
    v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = p[e];
  }
}

// Task t's 8 values quantized into xq (at x_offset), xd and xs (shared or global memory, the layout
// of gemv_smem_bytes), with the CPU's rounding: d = amax / 127, q = round-to-nearest-even(x * (127 /
// amax)). The 4 lanes of a 32-value block exchange their amax and sums by shuffles, so whole warps
// call it; a lane with valid false (past the last task, quantizing zeros) stores nothing.
template <bool kPieceMajor>
__device__ __forceinline__ void quantize_task(const float (&v)[8], int64_t t, int64_t k, bool valid,
                                              int8_t* xq, float* xd, float* xs) {
  const int64_t nb = k / 32, blk = t / 4, r = blk / nb, c = (blk % nb) * 32 + (t % 4) * 8;
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(v[e]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
  int sum = 0;
  uint32_t packed[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = __float2int_rn(__fmul_rn(v[e], id));
    sum += q;
    packed[e / 4] |= static_cast<uint32_t>(q & 0xff) << (8 * (e % 4));
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  if (!valid) return;
  *reinterpret_cast<uint2*>(xq + r * k + x_offset<kPieceMajor>(c, k)) = make_uint2(packed[0], packed[1]);
  if (t % 4 == 0) {
    const float d = __fdiv_rn(amax, 127.0f);
    xd[blk] = d;
    xs[blk] = mul(d, static_cast<float>(sum));
  }
}

// x quantized once for a whole GEMV launch (quant_x_kernel below) and copied by every block into
// its shared memory: `bytes` (gemv_smem_bytes) from src, 16-byte loads, kCopyAhead of a thread's in
// flight before any is stored. bytes is a multiple of 8 (m * k a multiple of 32, then 8 bytes of
// scales a block): the last 8 bytes past the 16-byte words go as two words.
__device__ __forceinline__ void copy_x_block(const uint8_t* __restrict__ src, size_t bytes, uint8_t* dst) {
  constexpr int kCopyAhead = 8;
  const size_t n16 = bytes / 16;
  const auto* s = reinterpret_cast<const int4*>(src);
  auto* d = reinterpret_cast<int4*>(dst);
  for (size_t i0 = 0; i0 < n16; i0 += static_cast<size_t>(kCopyAhead) * kQThreads) {
    int4 v[kCopyAhead];
#pragma unroll
    for (int a = 0; a < kCopyAhead; ++a) {
      const size_t i = i0 + static_cast<size_t>(a) * kQThreads + threadIdx.x;
      if (i < n16) v[a] = s[i];
    }
#pragma unroll
    for (int a = 0; a < kCopyAhead; ++a) {
      const size_t i = i0 + static_cast<size_t>(a) * kQThreads + threadIdx.x;
      if (i < n16) d[i] = v[a];
    }
  }
  for (size_t b = n16 * 16 + threadIdx.x * 4; b < bytes; b += kQThreads * 4) {
    *reinterpret_cast<uint32_t*>(dst + b) = *reinterpret_cast<const uint32_t*>(src + b);
  }
}

// Block prologue of the GEMVs: the M rows of x quantized into shared memory as 8-bit 32-value
// blocks (q at x_offset, d and d * sum(q) per block, quantize_task), 4 lanes per block and 8 values
// each -- or, with pre (x quantized once for the launch by quant_x_kernel, in this layout), copied.
// Each warp's first weight row is prefetched into L2 first, while the kernel that writes x may
// still run (the GEMV is launched with PDL; kernels/cuda/pdl.cuh); after the wait the loads of up
// to kRounds rounds of x are issued before any is used (16-byte loads when x allows), so the rounds
// do not wait for each other's round trips.
// Rounds run whole warps (the shuffles need every lane); lanes past the end quantize zeros.
// With f.norm_weight (kFused) each row is RMS-normalized first (gemv_fusion.cuh): when one group of
// rounds holds all of x its sums of squares come from the rounds' registers, else the block reads
// x once more for them before the rounds.
template <int M, bool kPieceMajor, bool kFused>
__device__ __forceinline__ void quantize_x_block(const float* __restrict__ x, int64_t k, int64_t ldx,
                                                 const uint8_t* __restrict__ pre, int8_t* xq, float* xd,
                                                 float* xs, const uint8_t* w, size_t row_bytes, int64_t n,
                                                 const GemvFusion& f) {
  constexpr int kRounds = 4;
  if (const int64_t j0 = first_row(n, kFused && f.silu_and_mul); j0 >= 0) {
    prefetch_row(w + static_cast<size_t>(j0) * row_bytes, row_bytes);
  }
  if (pre != nullptr) {  // never with kFused (quant_linear_fused quantizes in the block)
    pdl_wait();
    pdl_launch_dependents();
    timeline_mark(0);
    copy_x_block(pre, gemv_smem_bytes(M, k), reinterpret_cast<uint8_t*>(xq));
    return;
  }
  const int64_t nb = k / 32, tasks = M * nb * 4;
  const bool norm = kFused && f.norm_weight != nullptr;  // the same for the whole block
  // One group of rounds holds all of x: the norm's sums of squares come from the registers the
  // rounds loaded (no second read of x); else the block computes them first.
  const bool one_pass = tasks <= kRounds * kQThreads;
  if (norm && one_pass) {  // the norm weights the thread will need, into L1 before the wait
    for (int i = 0; i < kRounds; ++i) {
      if (const int64_t t = i * kQThreads + threadIdx.x; t < tasks) {
        const int64_t c = (t / 4 % nb) * 32 + (t % 4) * 8;
        prefetch_norm_weight(f, c);
      }
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  float inv[kFused ? M : 1];
  if constexpr (kFused) {
    if (norm && !one_pass) rows_inv_rms<M>(x, k, ldx, f.eps, inv);
  }
  timeline_mark(0);
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  for (int64_t t0 = 0; t0 < tasks; t0 += kRounds * kQThreads) {
    float v[kRounds][8];
#pragma unroll
    for (int i = 0; i < kRounds; ++i)
      load_task(x, k, ldx, t0 + i * kQThreads + threadIdx.x, tasks, vec, v[i]);
    if constexpr (kFused) {
      if (norm) {
        if (one_pass) {
          double sq[M] = {};
#pragma unroll
          for (int i = 0; i < kRounds; ++i) {
            const int64_t t = t0 + i * kQThreads + threadIdx.x;
            if (t < tasks) add_squares<M>(sq, t / 4 / nb, v[i]);
          }
          inv_rms_from_squares<M>(sq, k, f.eps, inv);
        }
#pragma unroll
        for (int i = 0; i < kRounds; ++i) {
          const int64_t t = t0 + i * kQThreads + threadIdx.x;
          if (t < tasks) normalize8<M>(v[i], inv, t / 4 / nb, f, (t / 4 % nb) * 32 + (t % 4) * 8);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {
      if (t0 + i * kQThreads >= tasks) break;  // the same for the whole block
      const int64_t t = t0 + i * kQThreads + threadIdx.x;
      quantize_task<kPieceMajor>(v[i], t, k, t < tasks, xq, xd, xs);
    }
  }
}

// x [m, k] quantized once for a GEMV launch into `dst` (gemv_smem_bytes(m, k): q at x_offset, then
// d, then d * sum(q)), one task a thread, whole warps (the grid covers the tasks rounded up to a
// block). Launched with PDL before the GEMV, whose blocks copy it (copy_x_block) instead of each
// quantizing all of x: at k = 14,336 that is 57 KB of f32 x read by every one of ~500 blocks.
template <bool kPieceMajor>
__global__ void __launch_bounds__(kQThreads) quant_x_kernel(const float* __restrict__ x, int64_t m, int64_t k,
                                                            int64_t ldx, uint8_t* __restrict__ dst) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t nb = k / 32, tasks = m * nb * 4;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kQThreads + threadIdx.x;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  float v[8];
  load_task(x, k, ldx, t, tasks, vec, v);
  auto* xq = reinterpret_cast<int8_t*>(dst);
  auto* xd = reinterpret_cast<float*>(dst + m * k);
  quantize_task<kPieceMajor>(v, t, k, t < tasks, xq, xd, xd + m * nb);
}

// Row j of a warp's loop, with the warp's next row (next < 0: none) prefetched into L2 while it
// works on this one, so its loads wait for L2, not DRAM.
__device__ __forceinline__ const uint8_t* warp_row(const uint8_t* w, size_t row_bytes, int64_t j,
                                                   int64_t next) {
  if (next >= 0) prefetch_row(w + static_cast<size_t>(next) * row_bytes, row_bytes);
  return w + static_cast<size_t>(j) * row_bytes;
}

// Warp sum of an accumulator (a fixed xor tree), plus the bias of row j.
__device__ __forceinline__ float row_sum(float s, int64_t j, const void* bias, DType bias_dtype) {
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s + (bias != nullptr ? load_as_float(bias, bias_dtype, j) : 0.0f);
}

// Column j of out's M rows as they are before the warp's row j (lane 0; accumulate only).
template <int M>
__device__ __forceinline__ void load_prev_column(const float* __restrict__ out, int64_t j, int64_t ldo,
                                                 bool accumulate, float (&prev)[M]) {
#pragma unroll
  for (int r = 0; r < M; ++r) prev[r] = load_prev(out, r * ldo + j, accumulate && threadIdx.x % 32 == 0);
}

// Row j's sums of the M rows of x, stored (or added to prev: accumulate) by lane 0.
template <int M>
__device__ __forceinline__ void store_row_sums(const float (&acc)[M], int64_t j, const void* bias,
                                               DType bias_dtype, float* __restrict__ out, int64_t ldo,
                                               bool accumulate, const float (&prev)[M]) {
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float s = row_sum(acc[r], j, bias, bias_dtype);
    if (threadIdx.x % 32 == 0) store_out(out, r * ldo + j, s, accumulate, prev[r]);
  }
}

// The row loop of both GEMV kernels after the prologue: dot_row(j, next, acc) sums weight row j
// against the M rows of x into acc (prefetching row next), whose sums are stored, added to out
// (accumulate) or, with SiLU-and-mul, paired gate with up through shared memory (kPairs above).
template <int M, bool kFused, typename DotRow>
__device__ __forceinline__ void gemv_row_loop(DotRow&& dot_row, int64_t n, const void* bias, DType bias_dtype,
                                              float* __restrict__ out, int64_t ldo, const GemvFusion& f) {
  const int warp = threadIdx.x / 32;
  const bool accumulate = kFused && f.accumulate;
  if (!(kFused && f.silu_and_mul)) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kQWarps;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * kQWarps + warp; j < n; j += stride) {
      float acc[M], prev[M];
      load_prev_column<M>(out, j, ldo, accumulate, prev);
      dot_row(j, j + stride < n ? j + stride : -1, acc);
      store_row_sums<M>(acc, j, bias, bias_dtype, out, ldo, accumulate, prev);
    }
    return;
  }
  if constexpr (kFused) {
    __shared__ float up_sums[kPairs][M];
    const int64_t half = n / 2, stride = static_cast<int64_t>(gridDim.x) * kPairs;
    const int q = warp % kPairs;
    const bool up = warp >= kPairs;
    // p0 is the same for the whole block, so every warp reaches both barriers of every round.
    for (int64_t p0 = static_cast<int64_t>(blockIdx.x) * kPairs; p0 < half; p0 += stride) {
      const int64_t p = p0 + q, row = up ? p + half : p;
      float acc[M], prev[M];
      if (p < half) {
        if (!up) load_prev_column<M>(out, p, ldo, accumulate, prev);
        dot_row(row, p + stride < half ? row + stride : -1, acc);
        if (up) {
#pragma unroll
          for (int r = 0; r < M; ++r) {
            const float u = row_sum(acc[r], row, bias, bias_dtype);
            if (threadIdx.x % 32 == 0) up_sums[q][r] = u;
          }
        }
      }
      __syncthreads();
      if (!up && p < half) {
#pragma unroll
        for (int r = 0; r < M; ++r) {
          const float g = row_sum(acc[r], p, bias, bias_dtype);
          if (threadIdx.x % 32 == 0)
            store_out(out, r * ldo + p, silu_mul(g, up_sums[q][r]), accumulate, prev[r]);
        }
      }
      __syncthreads();  // up_sums is rewritten next round
    }
  }
}

// kFused: the fusions of f (gemv_fusion.h); without it f is ignored and the code is the plain GEMV's.
template <DType T, int M, bool kFused>
__global__ void __launch_bounds__(kQThreads, 2)
    quant_gemv_kernel(const float* __restrict__ x, int64_t k, int64_t ldx, const uint8_t* __restrict__ pre,
                      bool staged, const uint8_t* __restrict__ w, size_t row_bytes, int64_t n,
                      const void* bias, DType bias_dtype, float* __restrict__ out, int64_t ldo,
                      GemvFusion f) {
  extern __shared__ int4 gemv_smem[];
  const int64_t nb = k / 32;
  const int lane = threadIdx.x % 32;
  int8_t* xq = reinterpret_cast<int8_t*>(gemv_smem);
  float* xd = reinterpret_cast<float*>(xq + M * k);
  float* xs = xd + M * nb;
  quantize_x_block<M, false, kFused>(x, k, ldx, pre, xq, xd, xs, w, row_bytes, n, f);
  __syncthreads();
  timeline_mark(1);
  auto unit_dots = [&](const WUnit& wu, int64_t u, float(&acc)[M]) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
      acc[r] +=
          unit_dot<T>(wu, reinterpret_cast<const int4*>(xq + r * k + u * 32), xd[r * nb + u], xs[r * nb + u]);
    }
  };
  if constexpr (kStaged<T>) {
    if (staged) {
      // The warp's stage after x's image; units u0 .. u0 + kUnits - 1 of the row go through it
      // (kStaged), lane l unpacking units u0 + l, u0 + l + 32, ...
      constexpr int kW = kStageWords<T>, kU = kStageUnitsPerLane<T>;
      constexpr int64_t kUnits = 32 * kU;
      constexpr int64_t kUnitsPerBlock = T == DType::kQ3_K || T == DType::kQ6_K ? 8 : 1;
      constexpr int64_t kBlockBytes = staged_bytes<T>() * kUnitsPerBlock / 32;
      int4* stage = reinterpret_cast<int4*>(reinterpret_cast<uint8_t*>(gemv_smem) + stage_offset(M, k)) +
                    (threadIdx.x / 32) * kW * 32;
      // The 16-byte words holding the bytes of units u0 .. u0 + kUnits - 1 of row (fewer at the row's end),
      // word i of the warp in words[i / 32] of lane i % 32: the first word is the aligned one
      // holding the units' first byte, `lead` bytes into it. Every word loaded holds at least one
      // of the units' bytes (so it lies inside the weight's allocation).
      auto segment = [&](const uint8_t* row, int64_t u0, int4(&words)[kW], int& lead) {
        const int64_t units = nb - u0 < kUnits ? nb - u0 : kUnits;
        const uintptr_t a =
            reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(u0 / kUnitsPerBlock * kBlockBytes);
        const uintptr_t a0 = a & ~uintptr_t{15};
        lead = static_cast<int>(a - a0);
        const int count = static_cast<int>(
            (a - a0 + static_cast<uintptr_t>(units / kUnitsPerBlock * kBlockBytes) + 15) / 16);
        const auto* src = reinterpret_cast<const int4*>(a0);
#pragma unroll
        for (int i = 0; i < kW; ++i) {
          if (const int wi = i * 32 + lane; wi < count) words[i] = src[wi];
        }
      };
      auto dot_row = [&](int64_t j, int64_t next, float(&acc)[M]) {
        const uint8_t* row = warp_row(w, row_bytes, j, next);
#pragma unroll
        for (int r = 0; r < M; ++r) acc[r] = 0.0f;
        int4 words[kW];
        int lead = 0;
        segment(row, 0, words, lead);
        for (int64_t u0 = 0; u0 < nb; u0 += kUnits) {
          __syncwarp();  // the stage's previous units are unpacked
#pragma unroll
          for (int i = 0; i < kW; ++i) stage[i * 32 + lane] = words[i];
          __syncwarp();
          const int cur = lead;
          if (u0 + kUnits < nb) segment(row, u0 + kUnits, words, lead);  // in flight while this one is used
#pragma unroll
          for (int i = 0; i < kU; ++i) {
            if (const int64_t u = u0 + i * 32 + lane; u < nb) {
              WUnit wu;
              load_unit<T>(reinterpret_cast<const uint8_t*>(stage) + cur, i * 32 + lane, wu);
              unit_dots(wu, u, acc);
            }
          }
        }
      };
      gemv_row_loop<M, kFused>(dot_row, n, bias, bias_dtype, out, ldo, f);
      timeline_mark(3);
      return;
    }
  }
  auto dot_row = [&](int64_t j, int64_t next, float(&acc)[M]) {
    const uint8_t* row = warp_row(w, row_bytes, j, next);
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.0f;
#pragma unroll 4
    for (int64_t u = lane; u < nb; u += 32) {
      WUnit wu;
      load_unit<T>(row, u, wu);
      unit_dots(wu, u, acc);
    }
  };
  gemv_row_loop<M, kFused>(dot_row, n, bias, bias_dtype, out, ldo, f);
  timeline_mark(3);
}

// Q4_K / Q5_K: the paired-group GEMV. Lane l of a warp takes the 64-value units l, l + 32, ... of
// a row: groups 2p and 2p + 1 of super-block u / 4 (p = u % 4), whose quants are the low and high
// nibbles of the same 32 bytes. Per unit a lane loads the super-block's 16-byte header (d, dmin,
// the packed 6-bit scales; the 4 lanes of a super-block share it) and its 32 quant bytes as two
// 16-byte vectors, all used: a warp's loads cover 8 super-blocks with ~3 wavefronts per
// instruction, where the one-group kernel loaded every quant byte twice and the header bytewise.
// x is stored piece-major (x_offset) so the activation loads do not conflict.
template <DType T>
constexpr bool kPairKernel = T == DType::kQ4_K || T == DType::kQ5_K;

// One row of x: 4 blocks a multiprocessor (64 registers) and one unit per lane in flight, measured
// faster than 3 blocks with two units (Q4_K, batch-1 step 3.004 vs 3.092 ms on an H100).
template <DType T, int M, bool kFused>
__global__ void __launch_bounds__(kQThreads, M == 1 ? 4 : 2)
    quant_gemv_pair_kernel(const float* __restrict__ x, int64_t k, int64_t ldx,
                           const uint8_t* __restrict__ pre, bool /*staged: 16-byte-aligned types*/,
                           const uint8_t* __restrict__ w, size_t row_bytes, int64_t n, const void* bias,
                           DType bias_dtype, float* __restrict__ out, int64_t ldo, GemvFusion f) {
  static_assert(kPairKernel<T>);
  constexpr int kBytes = T == DType::kQ4_K ? 144 : 176, kQs = T == DType::kQ4_K ? 16 : 48;
  extern __shared__ int4 gemv_smem[];
  const int64_t nb = k / 32, chunks = k / 64;
  const int lane = threadIdx.x % 32;
  int8_t* xq = reinterpret_cast<int8_t*>(gemv_smem);
  float* xd = reinterpret_cast<float*>(xq + M * k);
  float* xs = xd + M * nb;
  quantize_x_block<M, true, kFused>(x, k, ldx, pre, xq, xd, xs, w, row_bytes, n, f);
  __syncthreads();
  timeline_mark(1);
  const int4* xv = reinterpret_cast<const int4*>(xq);       // [M][4][chunks] 16-value pieces
  const float2* xd2 = reinterpret_cast<const float2*>(xd);  // [M][chunks]: the unit's two groups
  const float2* xs2 = reinterpret_cast<const float2*>(xs);
  // The lane's group pair is the same in every unit it takes (u % 4 = lane % 4): its scale bytes'
  // positions are fixed. Scales of group j (6 bits, packed in s[0..11] as in gguf_dequant):
  // j < 4: sc = s[j] & 63, m = s[j + 4] & 63; j >= 4: sc = s[j + 4] & 15 | (s[j - 4] >> 6) << 4,
  // m = s[j + 4] >> 4 | (s[j] >> 6) << 4. Header words: h.y = s[0..3], h.z = s[4..7], h.w = s[8..11].
  const int p = lane % 4;
  const int e = 16 * (p % 2);  // bit offset of the pair's first byte in its header word
  auto dot_row = [&](int64_t j, int64_t next, float(&acc)[M]) {
    const uint8_t* row = warp_row(w, row_bytes, j, next);
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.0f;
#pragma unroll(M == 1 ? 1 : 2)
    for (int64_t u = lane; u < chunks; u += 32) {
      const uint8_t* b = row + (u / 4) * kBytes;
      const uint4 h = *reinterpret_cast<const uint4*>(b);
      const uint4* qp = reinterpret_cast<const uint4*>(b + kQs + 32 * p);
      const uint4 q0 = qp[0], q1 = qp[1];
      const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
      const uint32_t a = h.y >> e, bb = h.z >> e, c = h.w >> e;
      int sc0, sc1, m0, m1;
      if (p < 2) {
        sc0 = a & 63, sc1 = a >> 8 & 63, m0 = bb & 63, m1 = bb >> 8 & 63;
      } else {
        sc0 = (c & 15) | (a >> 6 & 3) << 4, sc1 = (c >> 8 & 15) | (a >> 14 & 3) << 4;
        m0 = (c >> 4 & 15) | (bb >> 6 & 3) << 4, m1 = (c >> 12 & 15) | (bb >> 14 & 3) << 4;
      }
      const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x & 0xffffu)));
      const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x >> 16)));
      const float dl0 = mul(d, static_cast<float>(sc0)), dl1 = mul(d, static_cast<float>(sc1));
      const float ml0 = -mul(dmin, static_cast<float>(m0)), ml1 = -mul(dmin, static_cast<float>(m1));
      int lo[8], hi[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        lo[i] = static_cast<int>(q[i] & 0x0f0f0f0fu);
        hi[i] = static_cast<int>(q[i] >> 4 & 0x0f0f0f0fu);
      }
      if constexpr (T == DType::kQ5_K) {
        // Bit g of high-bit byte i is bit 4 of value i of group g.
        const uint4* hp = reinterpret_cast<const uint4*>(b + 16);
        const uint4 h0 = hp[0], h1 = hp[1];
        const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          lo[i] |= static_cast<int>((hw[i] >> (2 * p) & 0x01010101u) << 4);
          hi[i] |= static_cast<int>((hw[i] >> (2 * p + 1) & 0x01010101u) << 4);
        }
      }
#pragma unroll
      for (int r = 0; r < M; ++r) {
        const int4* xr = xv + r * 4 * chunks + u;
        const int4 a0 = xr[0], a1 = xr[chunks], a2 = xr[2 * chunks], a3 = xr[3 * chunks];
        int s0 = 0, s1 = 0;
        s0 = __dp4a(lo[0], a0.x, s0);
        s0 = __dp4a(lo[1], a0.y, s0);
        s0 = __dp4a(lo[2], a0.z, s0);
        s0 = __dp4a(lo[3], a0.w, s0);
        s0 = __dp4a(lo[4], a1.x, s0);
        s0 = __dp4a(lo[5], a1.y, s0);
        s0 = __dp4a(lo[6], a1.z, s0);
        s0 = __dp4a(lo[7], a1.w, s0);
        s1 = __dp4a(hi[0], a2.x, s1);
        s1 = __dp4a(hi[1], a2.y, s1);
        s1 = __dp4a(hi[2], a2.z, s1);
        s1 = __dp4a(hi[3], a2.w, s1);
        s1 = __dp4a(hi[4], a3.x, s1);
        s1 = __dp4a(hi[5], a3.y, s1);
        s1 = __dp4a(hi[6], a3.z, s1);
        s1 = __dp4a(hi[7], a3.w, s1);
        const float2 xdu = xd2[r * chunks + u], xsu = xs2[r * chunks + u];
        acc[r] += fmaf(xdu.x * dl0, static_cast<float>(s0), ml0 * xsu.x) +
                  fmaf(xdu.y * dl1, static_cast<float>(s1), ml1 * xsu.y);
      }
    }
  };
  gemv_row_loop<M, kFused>(dot_row, n, bias, bias_dtype, out, ldo, f);
  timeline_mark(3);
}

// One thread per (row, chunk); ids == nullptr: rows 0..num_rows-1.
template <DType T, typename O>
__global__ void dequant_rows_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t vocab_size,
                                    const int32_t* ids, int64_t ids_stride, int64_t num_rows, int64_t k,
                                    O* __restrict__ out, int64_t ldo, DeviceErrorRecord* rec) {
  const int64_t chunks = k / 32;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < num_rows * chunks;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / chunks, c = idx % chunks;
    const int64_t id = ids != nullptr ? ids[i * ids_stride] : i;
    if (id < 0 || id >= vocab_size) {
      if (c == 0) record_index_error(rec, IndexErrorOp::kEmbedding, i, id, vocab_size);
      continue;
    }
    float v[32];
    dequant_chunk<T>(w + static_cast<size_t>(id) * row_bytes, c, v);
    O* dst = out + i * ldo + c * 32;
    for (int t = 0; t < 32; ++t) dst[t] = from_float<O>(v[t]);
  }
}

// x (f32, row stride ldx) -> bf16 [m, k].
__global__ void x_to_bf16_kernel(const float* x, int64_t m, int64_t k, int64_t ldx, __nv_bfloat16* dst) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * k;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[idx] = __float2bfloat16_rn(x[(idx / k) * ldx + idx % k]);
  }
}

template <typename B>
__global__ void add_bias_kernel(float* out, int64_t m, int64_t n, int64_t ldo, const B* bias) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[(idx / n) * ldo + idx % n] += to_float(bias[idx % n]);
  }
}

// Calls f(std::integral_constant<DType, T>) for the block dtype `t`.
template <typename F>
void dispatch_quant(DType t, F&& f) {
  switch (t) {
    case DType::kQ8_0: return f(std::integral_constant<DType, DType::kQ8_0>{});
    case DType::kQ4_0: return f(std::integral_constant<DType, DType::kQ4_0>{});
    case DType::kQ4_1: return f(std::integral_constant<DType, DType::kQ4_1>{});
    case DType::kQ5_0: return f(std::integral_constant<DType, DType::kQ5_0>{});
    case DType::kQ5_1: return f(std::integral_constant<DType, DType::kQ5_1>{});
    case DType::kIQ4_NL: return f(std::integral_constant<DType, DType::kIQ4_NL>{});
    case DType::kQ2_K: return f(std::integral_constant<DType, DType::kQ2_K>{});
    case DType::kQ3_K: return f(std::integral_constant<DType, DType::kQ3_K>{});
    case DType::kQ4_K: return f(std::integral_constant<DType, DType::kQ4_K>{});
    case DType::kQ5_K: return f(std::integral_constant<DType, DType::kQ5_K>{});
    case DType::kQ6_K: return f(std::integral_constant<DType, DType::kQ6_K>{});
    case DType::kIQ4_XS: return f(std::integral_constant<DType, DType::kIQ4_XS>{});
    default: fail(str("cuda quantized linear: ", dtype_name(t), " is not a block-quantized dtype"));
  }
}

template <DType T, int M, bool kFused = false>
void launch_gemv(int device, const float* x, int64_t k, int64_t ldx, const uint8_t* w, size_t row_bytes,
                 int64_t n, const void* bias, DType bias_dtype, float* out, int64_t ldo, const GemvFusion& f,
                 cudaStream_t stream) {
  const bool staged = kStaged<T> && quant_gemv_staged_enabled();
  const size_t smem = staged ? gemv_block_smem_bytes<T>(M, k) : gemv_smem_bytes(M, k);
  auto* kernel = quant_gemv_kernel<T, M, kFused>;
  bool piece_major = false;  // the paired-group kernel's layout of quantized x
  // Q5_K with one row of x stays on the one-group kernel (measured faster: 3.528 vs 3.744 ms a step).
  if constexpr (kPairKernel<T> && (T == DType::kQ4_K || M > 1)) {
    if (quant_gemv_pairs_enabled()) {
      kernel = quant_gemv_pair_kernel<T, M, kFused>;
      piece_major = true;
    }
  }
  if (smem > 48 * 1024) {
    // Per launch, as the limit is per device and function; not a stream operation (capturable).
    RLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int per_sm = resident_blocks_per_sm(device, reinterpret_cast<const void*>(kernel), kQThreads, smem);
  const int sms = multiprocessor_count(device);
  // Every block quantizes x once: as many blocks as fit at once, rows grid-strided over their warps
  // (one row a warp at a time, with or without SiLU-and-mul), the warp count shrunk so that every
  // warp gets the same number of rows (the last fewer).
  const int64_t max_warps = static_cast<int64_t>(sms) * std::max(per_sm, 1) * kQWarps;
  const int64_t iters = (n + max_warps - 1) / max_warps;
  const int64_t blocks = ((n + iters - 1) / iters + kQWarps - 1) / kQWarps;
  // Long x: quantized once into the context's scratch (held until both kernels are queued) by
  // quant_x_kernel, which the blocks copy instead of each quantizing all of x.
  std::unique_lock<std::mutex> lock;
  const uint8_t* pre = nullptr;
  if (!kFused && M * k >= quant_gemv_prequantize_min()) {
    CudaContext& ctx = CudaContext::get(device);
    lock = ctx.lock();
    auto* buf = static_cast<uint8_t*>(ctx.scratch(gemv_smem_bytes(M, k)));
    const int64_t tasks = M * (k / 32) * 4;
    launch_pdl(piece_major ? quant_x_kernel<true> : quant_x_kernel<false>,
               dim3(static_cast<unsigned>((tasks + kQThreads - 1) / kQThreads)), dim3(kQThreads), 0, stream,
               x, int64_t{M}, k, ldx, buf);
    pre = buf;
  }
  launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kQThreads), smem, stream, x, k, ldx, pre,
             staged, w, row_bytes, n, bias, bias_dtype, out, ldo, f);
}

template <DType T>
void gemv_rows(int device, int64_t m, const float* x, int64_t k, int64_t ldx, const uint8_t* w, size_t row_bytes,
               int64_t n, const void* bias, DType bias_dtype, float* out, int64_t ldo, cudaStream_t stream) {
  const GemvFusion none;
  switch (m) {
    case 1:
      return launch_gemv<T, 1>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, none, stream);
    case 2:
      return launch_gemv<T, 2>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, none, stream);
    case 3:
      return launch_gemv<T, 3>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, none, stream);
    case 4:
      return launch_gemv<T, 4>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, none, stream);
    default:
      return launch_gemv<T, 8>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, none, stream);
  }
}

// The fused kernels: 1-2 rows of x (kQuantFusedMaxRows).
template <DType T>
void fused_gemv_rows(int device, int64_t m, const float* x, int64_t k, int64_t ldx, const uint8_t* w,
                     size_t row_bytes, int64_t n, const void* bias, DType bias_dtype, float* out, int64_t ldo,
                     const GemvFusion& f, cudaStream_t stream) {
  if (m == 1)
    return launch_gemv<T, 1, true>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, f, stream);
  launch_gemv<T, 2, true>(device, x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, f, stream);
}

// The most rows of x one GEMV launch takes (8, 4, 2 or 1: x quantized in shared memory must fit),
// or 0 when the GEMV does not apply (alignment of the weight for its unit loads, or k too long).
int64_t gemv_launch_rows(int device, DType t, const void* w, size_t row_bytes, int64_t k) {
  size_t align = 2;
  size_t (*smem_bytes)(int64_t, int64_t) = gemv_smem_bytes;
  dispatch_quant(t, [&](auto tt) {
    constexpr DType T = decltype(tt)::value;
    align = unit_align<T>();
    if (kStaged<T> && quant_gemv_staged_enabled()) smem_bytes = gemv_block_smem_bytes<T>;
  });
  if ((reinterpret_cast<uintptr_t>(w) | row_bytes) % align != 0) return 0;
  const auto limit = static_cast<size_t>(gemv_max_smem_bytes(device));
  for (int64_t rows = kQuantGemvMaxRows; rows >= 1; rows /= 2) {
    if (smem_bytes(rows, k) <= limit) return rows;
  }
  return 0;
}

template <DType T, typename O>
void launch_dequant_rows(const uint8_t* w, size_t row_bytes, int64_t vocab_size, const int32_t* ids,
                         int64_t ids_stride, int64_t num_rows, int64_t k, O* out, int64_t ldo, DeviceErrorRecord* rec,
                         cudaStream_t stream) {
  dequant_rows_kernel<T, O><<<grid_for(num_rows * (k / 32)), kBlock, 0, stream>>>(w, row_bytes, vocab_size, ids,
                                                                                 ids_stride, num_rows, k, out, ldo, rec);
  RLM_CUDA_CHECK_LAUNCH();
}

std::atomic<bool>& pairs_flag() {
  static std::atomic<bool> flag{true};
  return flag;
}

std::atomic<bool>& staged_flag() {
  static std::atomic<bool> flag{env_switch_on("RADIXLM_QUANT_GEMV_STAGED")};
  return flag;
}

std::atomic<int64_t>& prequantize_min() {
  static std::atomic<int64_t> min{env_int64("RADIXLM_QUANT_GEMV_PREQ_MIN", kQuantGemvPrequantizeMin)};
  return min;
}

int as_int(int64_t v, const char* what) {
  RLM_CHECK(v >= 0 && v <= 0x7fffffff) << "quant_linear: " << what << " = " << v << " does not fit cuBLAS's int";
  return static_cast<int>(v);
}

}  // namespace

void set_quant_gemv_pairs_enabled(bool enabled) { pairs_flag().store(enabled, std::memory_order_relaxed); }

bool quant_gemv_pairs_enabled() { return pairs_flag().load(std::memory_order_relaxed); }

void set_quant_gemv_staged_enabled(bool enabled) { staged_flag().store(enabled, std::memory_order_relaxed); }

bool quant_gemv_staged_enabled() { return staged_flag().load(std::memory_order_relaxed); }

void set_quant_gemv_prequantize_min(int64_t values) {
  prequantize_min().store(values, std::memory_order_relaxed);
}

int64_t quant_gemv_prequantize_min() { return prequantize_min().load(std::memory_order_relaxed); }

bool quant_linear_fused(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                        DType weight_dtype, int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype,
                        float* out, int64_t ldo, const GemvFusion& f) {
  RLM_CHECK(is_quantized(weight_dtype) && k % dtype_block_size(weight_dtype) == 0)
      << "cuda::quant_linear_fused: weight " << dtype_name(weight_dtype) << " with k = " << k;
  const auto* w = static_cast<const uint8_t*>(weight);
  if (m < 1 || m > kQuantFusedMaxRows || n < 1 || (f.silu_and_mul && n % 2 != 0)) return false;
  if (gemv_launch_rows(device, weight_dtype, w, w_row_bytes, k) < m) return false;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  dispatch_quant(weight_dtype, [&](auto t) {
    fused_gemv_rows<decltype(t)::value>(device, m, x, k, ldx, w, w_row_bytes, n, bias, bias_dtype, out, ldo,
                                        f, stream);
  });
  return true;
}

void quant_linear(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                  DType weight_dtype, int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype, float* out,
                  int64_t ldo) {
  RLM_CHECK(is_quantized(weight_dtype) && k % dtype_block_size(weight_dtype) == 0)
      << "cuda::quant_linear: weight " << dtype_name(weight_dtype) << " with k = " << k;
  if (m == 0 || n == 0) return;
  const auto* w = static_cast<const uint8_t*>(weight);
  // Decode: GEMV launches of 8, 4 or fewer rows of x, fewer when x quantized would not fit in
  // shared memory.
  const int64_t max_rows = m <= kQuantGemvMaxRows ? gemv_launch_rows(device, weight_dtype, w, w_row_bytes, k) : 0;
  if (max_rows > 0) {
    const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
    dispatch_quant(weight_dtype, [&](auto t) {
      constexpr DType T = decltype(t)::value;
      int64_t r = 0;
      while (r < m) {
        const int64_t rows = std::min(max_rows, m - r >= 8 ? 8 : m - r >= 4 ? 4 : m - r);
        gemv_rows<T>(device, rows, x + r * ldx, k, ldx, w, w_row_bytes, n, bias, bias_dtype, out + r * ldo, ldo,
                     stream);
        r += rows;
      }
    });
    return;
  }
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();  // guards the scratch and the handle
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  // Weight rows per GEMM: a bf16 scratch of at most ~64 MiB (at least 256 rows).
  const int64_t chunk = std::min(n, std::max<int64_t>(256, (int64_t{64} << 20) / (2 * k)));
  auto* scratch = static_cast<__nv_bfloat16*>(ctx.scratch(static_cast<size_t>((m + chunk) * k) * 2));
  __nv_bfloat16* xs = scratch;
  __nv_bfloat16* ws = scratch + m * k;
  x_to_bf16_kernel<<<grid_for(m * k), kBlock, 0, stream>>>(x, m, k, ldx, xs);
  RLM_CUDA_CHECK_LAUNCH();
  auto handle = static_cast<cublasHandle_t>(ctx.cublas());
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
    const int64_t rows = std::min(chunk, n - j0);
    dispatch_quant(weight_dtype, [&](auto t) {
      constexpr DType T = decltype(t)::value;
      launch_dequant_rows<T, __nv_bfloat16>(w + static_cast<size_t>(j0) * w_row_bytes, w_row_bytes, rows, nullptr,
                                             0, rows, k, ws, k, nullptr, stream);
    });
    // Column-major: out^T[rows, m] (at column offset j0) = W_chunk^T-as-stored (k x rows)^T * x^T (k x m).
    RLM_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, as_int(rows, "n"), as_int(m, "m"), as_int(k, "k"),
                                  &alpha, ws, CUDA_R_16BF, as_int(k, "k"), xs, CUDA_R_16BF, as_int(k, "k"), &beta,
                                  out + j0, CUDA_R_32F, as_int(ldo, "ldo"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias != nullptr) {
    dispatch_float(bias_dtype, [&](auto bt) {
      using B = decltype(bt);
      add_bias_kernel<B><<<grid_for(m * n), kBlock, 0, stream>>>(out, m, n, ldo, static_cast<const B*>(bias));
      RLM_CUDA_CHECK_LAUNCH();
    });
  }
}

void dequantize_rows(int device, const void* weight, DType weight_dtype, size_t w_row_bytes, int64_t vocab_size,
                     const int32_t* ids, int64_t ids_stride, int64_t num_rows, int64_t k, void* out, DType out_dtype,
                     int64_t ldo) {
  RLM_CHECK(is_quantized(weight_dtype) && k % dtype_block_size(weight_dtype) == 0)
      << "cuda::dequantize_rows: weight " << dtype_name(weight_dtype) << " with k = " << k;
  if (num_rows == 0 || k == 0) return;
  DeviceErrorRecord* rec = ids != nullptr ? check_token_ids(device, ids, num_rows, ids_stride, vocab_size) : nullptr;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const auto* w = static_cast<const uint8_t*>(weight);
  dispatch_quant(weight_dtype, [&](auto t) {
    constexpr DType T = decltype(t)::value;
    dispatch_float(out_dtype, [&](auto o) {
      using O = decltype(o);
      launch_dequant_rows<T, O>(w, w_row_bytes, vocab_size, ids, ids_stride, num_rows, k, static_cast<O*>(out), ldo,
                                rec, stream);
    });
  });
}

}  // namespace rlm::cuda
