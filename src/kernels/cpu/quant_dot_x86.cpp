// AVX2 and AVX-512 (VNNI) integer dot-product kernels for quant_dot.h. Each ISA's code is compiled
// under `#pragma GCC target` (no global -march flag), and quant_dot_rows picks one at run time.
//
// A weight block is unpacked to 32 unsigned 8-bit values u (or signed ones s for Q8_0 / IQ4_*)
// per 32 elements; an activation block holds 32 signed q's. Products:
//   AVX2:    maddubs(u, q) (u8 x s8 -> pairs summed in i16; u <= 63 so nothing saturates), then
//            madd with ones (or the per-16 sub-block scales of the K-quants) -> 8 x i32;
//            signed weights use |s| x sign(q, s) (|s|, |q| <= 127, no saturation).
//   AVX-512: vpdpbusd (u8 x s8, four products summed into i32, no intermediate saturation);
//            signed weights are offset to u = s + 128 and corrected with 128 * sum(q).
// Offsets and minimums (value = d * u + m, or d * (u - o)) are applied with the activation
// blocks' sums. Everything before the float scale is an exact integer.
#include "kernels/cpu/quant_dot.h"

#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace rlm::cpu {
namespace {

constexpr int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes -> 32 nibbles: low nibbles in bytes 0-15, high nibbles in bytes 16-31.
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0f));
}

// Bit i of x -> byte i: 0x10 where set, 0 elsewhere.
inline __m256i bits_to_0x10(uint32_t x) {
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

// The IQ4_NL codebook in both 128-bit lanes (for a per-lane byte shuffle).
inline __m256i iq4nl_table() {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nl));
  return _mm256_set_m128i(t, t);
}

// ---- 32-element weight blocks ----
// load(): the block's 32 values (unsigned u, or signed s when kSigned), its scale dw and the
// coefficient c of the activation block sum: dot = dw * da * sum(v * q) + c * (da * sum(q)).

struct WQ8_0 {
  static constexpr bool kSigned = true, kCorr = false;
  static constexpr size_t kBytes = 34;
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    *dw = h2f(b);
    *c = 0.0f;
    return load256(b + 2);
  }
};

struct WQ4_0 {
  static constexpr bool kSigned = false, kCorr = true;
  static constexpr size_t kBytes = 18;
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    *dw = h2f(b);
    *c = -8.0f * *dw;
    return nibbles(b + 2);
  }
};

struct WQ4_1 {
  static constexpr bool kSigned = false, kCorr = true;
  static constexpr size_t kBytes = 20;
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    *dw = h2f(b);
    *c = h2f(b + 2);
    return nibbles(b + 4);
  }
};

struct WQ5_0 {
  static constexpr bool kSigned = false, kCorr = true;
  static constexpr size_t kBytes = 22;
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    *dw = h2f(b);
    *c = -16.0f * *dw;
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    return _mm256_or_si256(nibbles(b + 6), bits_to_0x10(qh));
  }
};

struct WQ5_1 {
  static constexpr bool kSigned = false, kCorr = true;
  static constexpr size_t kBytes = 24;
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    *dw = h2f(b);
    *c = h2f(b + 2);
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    return _mm256_or_si256(nibbles(b + 8), bits_to_0x10(qh));
  }
};

struct WIQ4_NL {
  static constexpr bool kSigned = true, kCorr = false;
  static constexpr size_t kBytes = 18;
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    *dw = h2f(b);
    *c = 0.0f;
    return _mm256_shuffle_epi8(iq4nl_table(), nibbles(b + 2));
  }
};

// ---- 256-element super-blocks ----
// For group g (32 elements, g = 0..7), group(g) gives the 32 values; the 16 per-16 integer scales
// sc16 multiply the i16 pair sums (madd); the correction is cscale * sum_16(cw16 * bsum16) with
// value = d * sc16 * v - (correction per element), see each type.

// Per-16 scale vectors for madd: for group g, sub-block 2g's scale in the low 128-bit lane and
// 2g+1's in the high lane. `lo` holds scales 0-7 (i16) in both lanes, `hi` scales 8-15.
struct GroupScales {
  __m256i lo, hi;
  static GroupScales from16(__m128i sc0_7, __m128i sc8_15) {
    return {_mm256_set_m128i(sc0_7, sc0_7), _mm256_set_m128i(sc8_15, sc8_15)};
  }
  __m256i group(int g) const {
    alignas(32) static constexpr int8_t kShuf[4][32] = {
        {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
        {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
        {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
        {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14,
         15, 14, 15, 14, 15}};
    return _mm256_shuffle_epi8(g < 4 ? lo : hi, load256(kShuf[g % 4]));
  }
};

// 8 i16 values each repeated twice -> 16 i16 (per-32 values as per-16 ones).
inline __m256i dup_pairs(__m128i v8) {
  return _mm256_set_m128i(_mm_unpackhi_epi16(v8, v8), _mm_unpacklo_epi16(v8, v8));
}

inline __m128i u32x4_to_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return _mm_setr_epi32(static_cast<int>(a), static_cast<int>(b), static_cast<int>(c), static_cast<int>(d));
}

// The eight 6-bit scales and mins of Q4_K / Q5_K, as i16 x 8 each.
inline void k_scales_mins(const uint8_t* s, __m128i* sc, __m128i* mn) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, s, 4);
  std::memcpy(&w1, s + 4, 4);
  std::memcpy(&w2, s + 8, 4);
  const uint32_t sc03 = w0 & 0x3f3f3f3fu, mn03 = w1 & 0x3f3f3f3fu;
  const uint32_t sc47 = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
  const uint32_t mn47 = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
  const __m128i bytes = u32x4_to_bytes(sc03, sc47, mn03, mn47);
  *sc = _mm_cvtepu8_epi16(bytes);
  *mn = _mm_cvtepu8_epi16(_mm_srli_si128(bytes, 8));
}

inline __m256i shift_mask(__m256i x, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(static_cast<char>(mask)));
}

struct WQ2_K {
  static constexpr bool kSigned = false;
  static constexpr size_t kBytes = 84;
  const uint8_t* b;
  GroupScales sc;
  __m256i cw16;  // mins
  float d, cscale;
  explicit WQ2_K(const uint8_t* blk) : b(blk) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
    const __m128i lo = _mm_and_si128(s, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(15));
    sc = GroupScales::from16(_mm_cvtepu8_epi16(lo), _mm_cvtepu8_epi16(_mm_srli_si128(lo, 8)));
    cw16 = _mm256_cvtepu8_epi16(hi);
    d = h2f(blk + 80);
    cscale = -h2f(blk + 82);
  }
  __m256i group(int g) const { return shift_mask(load256(b + 16 + 32 * (g / 4)), 2 * (g % 4), 3); }
};

struct WQ3_K {
  static constexpr bool kSigned = false;
  static constexpr size_t kBytes = 110;
  const uint8_t* b;
  GroupScales sc;
  __m256i cw16;  // the scales: value = d * sc * (u - 4)
  float d, cscale;
  explicit WQ3_K(const uint8_t* blk) : b(blk) {
    const uint8_t* s = blk + 96;
    alignas(16) int8_t v[16];
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
      v[i] = static_cast<int8_t>((low | (s[8 + i % 4] >> (2 * (i / 4)) & 3) << 4) - 32);
    }
    const __m128i v8 = _mm_load_si128(reinterpret_cast<const __m128i*>(v));
    const __m128i lo = _mm_cvtepi8_epi16(v8), hi = _mm_cvtepi8_epi16(_mm_srli_si128(v8, 8));
    sc = GroupScales::from16(lo, hi);
    cw16 = _mm256_set_m128i(hi, lo);
    d = h2f(blk + 108);
    cscale = -4.0f * d;
  }
  __m256i group(int g) const {
    const __m256i low = shift_mask(load256(b + 32 + 32 * (g / 4)), 2 * (g % 4), 3);
    const __m256i hbit = shift_mask(load256(b), g, 1);
    return _mm256_or_si256(low, _mm256_slli_epi16(hbit, 2));
  }
};

struct WQ4_K {
  static constexpr bool kSigned = false;
  static constexpr size_t kBytes = 144;
  const uint8_t* b;
  GroupScales sc;
  __m256i cw16;
  float d, cscale;
  explicit WQ4_K(const uint8_t* blk) : b(blk) {
    __m128i s8, m8;
    k_scales_mins(blk + 4, &s8, &m8);
    const __m256i s16 = dup_pairs(s8);
    sc = GroupScales::from16(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
    cw16 = dup_pairs(m8);
    d = h2f(blk);
    cscale = -h2f(blk + 2);
  }
  __m256i group(int g) const { return shift_mask(load256(b + 16 + 32 * (g / 2)), 4 * (g % 2), 15); }
};

struct WQ5_K {
  static constexpr bool kSigned = false;
  static constexpr size_t kBytes = 176;
  const uint8_t* b;
  GroupScales sc;
  __m256i cw16;
  float d, cscale;
  explicit WQ5_K(const uint8_t* blk) : b(blk) {
    __m128i s8, m8;
    k_scales_mins(blk + 4, &s8, &m8);
    const __m256i s16 = dup_pairs(s8);
    sc = GroupScales::from16(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
    cw16 = dup_pairs(m8);
    d = h2f(blk);
    cscale = -h2f(blk + 2);
  }
  __m256i group(int g) const {
    const __m256i low = shift_mask(load256(b + 48 + 32 * (g / 2)), 4 * (g % 2), 15);
    return _mm256_or_si256(low, _mm256_slli_epi16(shift_mask(load256(b + 16), g, 1), 4));
  }
};

struct WQ6_K {
  static constexpr bool kSigned = false;
  static constexpr size_t kBytes = 210;
  const uint8_t* b;
  GroupScales sc;
  __m256i cw16;  // the scales: value = d * sc * (u - 32)
  float d, cscale;
  explicit WQ6_K(const uint8_t* blk) : b(blk) {
    const __m128i v8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
    const __m128i lo = _mm_cvtepi8_epi16(v8), hi = _mm_cvtepi8_epi16(_mm_srli_si128(v8, 8));
    sc = GroupScales::from16(lo, hi);
    cw16 = _mm256_set_m128i(hi, lo);
    d = h2f(blk + 208);
    cscale = -32.0f * d;
  }
  __m256i group(int g) const {
    const __m256i low = shift_mask(load256(b + 64 * (g / 4) + 32 * (g % 2)), 4 * ((g / 2) % 2), 15);
    const __m256i high = shift_mask(load256(b + 128 + 32 * (g / 4)), 2 * (g % 4), 3);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
};

struct WIQ4_XS {
  static constexpr bool kSigned = true;
  static constexpr size_t kBytes = 136;
  const uint8_t* b;
  GroupScales sc;
  __m256i cw16;
  float d, cscale;
  explicit WIQ4_XS(const uint8_t* blk) : b(blk) {
    uint16_t sh;
    std::memcpy(&sh, blk + 2, 2);
    alignas(16) int16_t v[8];
    for (int i = 0; i < 8; ++i) v[i] = static_cast<int16_t>((((blk[4 + i / 2] >> (4 * (i % 2))) & 15) | ((sh >> (2 * i)) & 3) << 4) - 32);
    const __m256i s16 = dup_pairs(_mm_load_si128(reinterpret_cast<const __m128i*>(v)));
    sc = GroupScales::from16(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
    cw16 = _mm256_setzero_si256();
    d = h2f(blk);
    cscale = 0.0f;
  }
  __m256i group(int g) const { return _mm256_shuffle_epi8(iq4nl_table(), nibbles(b + 8 + 16 * g)); }
};

// ---- unpacked weight blocks (batches) ----
// A batch passes every weight block once per group of 4 activation rows. quant_matmul unpacks a
// tile of weight rows once into a scratch buffer that all the groups of a pass read, a 32-element
// block as its 32 values and the floats dw, c. The kernels read them through the same interface as
// the packed blocks and do the same arithmetic on the same values, so the results are the same
// bits. (The super-blocks unpack in a few instructions per group, and unpacked ones, 640 bytes
// with their scale vectors, measured slower: the K-quants have no unpacked kernel.)

template <class W>
struct Unpacked32 {
  static constexpr bool kSigned = W::kSigned, kCorr = W::kCorr;
  static constexpr size_t kBytes = 40;  // v[32], dw, c
  static __m256i load(const uint8_t* b, float* dw, float* c) {
    std::memcpy(dw, b + 32, 4);
    std::memcpy(c, b + 36, 4);
    return load256(b);
  }
  static void unpack(const uint8_t* w, int64_t nb, uint8_t* out) {
    for (int64_t b = 0; b < nb; ++b, w += W::kBytes, out += kBytes) {
      float dw, c;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), W::load(w, &dw, &c));
      std::memcpy(out + 32, &dw, 4);
      std::memcpy(out + 36, &c, 4);
    }
  }
};

// n rows of `nb` blocks of W (ldw bytes apart) -> n rows of nb unpacked blocks.
template <class W>
void unpack_rows(const uint8_t* w, size_t ldw, int64_t n, int64_t nb, uint8_t* out) {
  for (int64_t j = 0; j < n; ++j)
    Unpacked32<W>::unpack(w + j * ldw, nb, out + j * nb * Unpacked32<W>::kBytes);
}

// ---- shared by the kernels of both ISAs ----

// f32 dot product of n values.
inline float dot_f32(const float* x, const float* y, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// The scale of (weight block b, activation row r): dw * d[r][b]. One row reads d directly; a tile of
// rows multiplies the 4 rows' scales (block-major d4) at once and picks lane r.
template <int NR>
struct BlockScales {
  __m256 dd;  // NR > 1: the 4 rows' products in both 128-bit lanes
  float single;
  BlockScales(float dw, const Q8View& a, int64_t b) {
    if constexpr (NR == 1) {
      single = dw * a.d[b];
    } else {
      const __m128 p = _mm_mul_ps(_mm_set1_ps(dw), _mm_loadu_ps(a.d4 + b * 4));
      dd = _mm256_set_m128(p, p);
    }
  }
  template <int R>
  __m256 row() const {
    if constexpr (NR == 1) return _mm256_set1_ps(single);
    return _mm256_permute_ps(dd, R * 0x55);  // lane R of each half, everywhere
  }
};

// Offsets and minimums: the coefficients c of a chunk of blocks are collected, then dotted with
// each row's block sums (one f32 dot per row and chunk instead of a multiply-add per block).
constexpr int64_t kCorrChunk = 64;

}  // namespace

void quantize_row_q8_avx2(const float* x, int64_t k, int64_t block, int8_t* q, float* d, float* sum,
                          int16_t* bsums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < k / block; ++b) {
    const float* xb = x + b * block;
    __m256 mx = _mm256_setzero_ps();
    for (int64_t j = 0; j < block; j += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    for (int64_t j = 0; j < block; j += 32) {
      __m256i v[4];
      for (int t = 0; t < 4; ++t) {
        const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(xb + j + 8 * t), id);
        v[t] = _mm256_cvtps_epi32(_mm256_round_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * block + j), _mm256_permutevar8x32_epi32(p, perm));
    }
  }
  const __m256i ones8 = _mm256_set1_epi8(1);
  for (int64_t g = 0; g < k / 32; ++g) {
    // Sums of each 4 q's, in order: i32 lanes 0-3 cover values 0-15, lanes 4-7 values 16-31.
    const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, load256(q + g * 32)), _mm256_set1_epi16(1));
    const __m128i lo = _mm256_castsi256_si128(s4), hi = _mm256_extracti128_si256(s4, 1);
    const __m128i h = _mm_hadd_epi32(lo, hi);  // [0-7, 8-15, 16-23, 24-31]
    const __m128i h2 = _mm_hadd_epi32(h, h);   // [0-15, 16-31, ...]
    const int s0 = _mm_cvtsi128_si32(h2), s1 = _mm_extract_epi32(h2, 1);
    if (block == 32) {
      sum[g] = d[g] * static_cast<float>(s0 + s1);
    } else {
      bsums[2 * g] = static_cast<int16_t>(s0);
      bsums[2 * g + 1] = static_cast<int16_t>(s1);
    }
  }
}

// ---- AVX2: maddubs / madd; signed weights by the sign trick ----

namespace {
namespace isa_avx2 {
struct Isa {
  static constexpr bool kOffsetSigned = false;
  template <bool kSigned>
  static __m256i prep_w(__m256i v) { return kSigned ? _mm256_sign_epi8(v, v) : v; }
  template <bool kSigned>
  static __m256i prep_q(__m256i q, __m256i v) { return kSigned ? _mm256_sign_epi8(q, v) : q; }
  static __m256i dot(__m256i u, __m256i q) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1)); }
  // Pair sums times the per-16 scales of the group (i16 x 16) -> 8 x i32.
  static __m256i dot_scaled(__m256i u, __m256i q, __m256i sv) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), sv); }
};
#include "kernels/cpu/quant_dot_kernels.inc"
}  // namespace isa_avx2
}  // namespace

QuantDotFn avx2_dot_kernel(DType wtype) { return isa_avx2::kernel(wtype); }
QuantDotFn avx2_unpacked_dot_kernel(DType wtype) { return isa_avx2::unpacked_kernel(wtype); }

UnpackFn x86_unpack_fn(DType wtype, size_t* block_bytes) {
  *block_bytes = Unpacked32<WQ4_0>::kBytes;  // the same for every W
  switch (wtype) {
    case DType::kQ4_0: return unpack_rows<WQ4_0>;
    case DType::kQ4_1: return unpack_rows<WQ4_1>;
    case DType::kQ5_0: return unpack_rows<WQ5_0>;
    case DType::kQ5_1: return unpack_rows<WQ5_1>;
    case DType::kIQ4_NL: return unpack_rows<WIQ4_NL>;
    default: *block_bytes = 0; return nullptr;
  }
}

}  // namespace rlm::cpu

#pragma GCC pop_options

// ---- AVX-512 (F/BW/VL + VNNI): vpdpbusd on 256-bit vectors; signed weights offset by 128 -------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

namespace rlm::cpu {
namespace {
namespace isa_avx512 {
struct Isa {
  static constexpr bool kOffsetSigned = true;
  template <bool kSigned>
  static __m256i prep_w(__m256i v) { return kSigned ? _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))) : v; }
  template <bool kSigned>
  static __m256i prep_q(__m256i q, __m256i) { return q; }
  static __m256i dot(__m256i u, __m256i q) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, q); }
  // i32 lane i sums values 4i..4i+3: lanes 0-3 take the low half's scale, lanes 4-7 the high half's.
  static __m256i dot_scaled(__m256i u, __m256i q, __m256i sv) {
    const __m256i s32 = _mm256_blend_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(sv)),
                                           _mm256_cvtepi16_epi32(_mm256_extracti128_si256(sv, 1)), 0xf0);
    return _mm256_mullo_epi32(dot(u, q), s32);
  }
};
#include "kernels/cpu/quant_dot_kernels.inc"
}  // namespace isa_avx512
}  // namespace

QuantDotFn avx512_dot_kernel(DType wtype) { return isa_avx512::kernel(wtype); }
QuantDotFn avx512_unpacked_dot_kernel(DType wtype) { return isa_avx512::unpacked_kernel(wtype); }

}  // namespace rlm::cpu

#pragma GCC pop_options

#else  // not x86-64: the scalar kernels only

namespace rlm::cpu {
QuantDotFn avx2_dot_kernel(DType) { return nullptr; }
QuantDotFn avx512_dot_kernel(DType) { return nullptr; }
QuantDotFn avx2_unpacked_dot_kernel(DType) { return nullptr; }
QuantDotFn avx512_unpacked_dot_kernel(DType) { return nullptr; }
UnpackFn x86_unpack_fn(DType, size_t* block_bytes) {
  *block_bytes = 0;
  return nullptr;
}
void quantize_row_q8_avx2(const float*, int64_t, int64_t, int8_t*, float*, float*, int16_t*) {
  fail("quantize_row_q8_avx2 on a non-x86 build");
}
}  // namespace rlm::cpu

#endif
