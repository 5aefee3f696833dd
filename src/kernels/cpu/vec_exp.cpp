#include "kernels/cpu/vec_exp.h"

#include <bit>
#include <cstring>
#include <limits>

namespace rlm::cpu {
namespace {

// Forced inline (also at -O0) so that the AVX2 clones below never pass a 32-byte vector to a
// helper compiled without AVX (the ABI difference -Wpsabi warns about).
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
#define RLM_VEC_INLINE inline __attribute__((always_inline))

RLM_VEC_INLINE V8 splat(float v) { return V8{} + v; }

RLM_VEC_INLINE V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

RLM_VEC_INLINE void store8(float* p, V8 v) { std::memcpy(p, &v, sizeof(v)); }

// 2^k for integer k in [-126, 127], exactly.
RLM_VEC_INLINE V8 pow2(I8 k) { return std::bit_cast<V8>((k + 127) << 23); }

RLM_VEC_INLINE V8 exp8(V8 x) {
  // Clamp (a NaN compares false and stays NaN): e^-104 < 2^-150 rounds to 0, e^88.8 > FLT_MAX.
  x = x < splat(-104.0f) ? splat(-104.0f) : x;
  x = x > splat(88.8f) ? splat(88.8f) : x;
  // n = round(x log2 e) by the 1.5 * 2^23 trick (round to nearest even; |n| <= 151 here).
  const V8 magic = splat(12582912.0f);
  const V8 t = x * splat(1.44269504088896341f) + magic;
  const V8 n = t - magic;
  const I8 ni = std::bit_cast<I8>(t) - std::bit_cast<I8>(magic);
  // r = x - n ln2, ln2 = 0.693359375 (exact, 9 bits) - 2.12194440e-4.
  const V8 r = (x - n * splat(0.693359375f)) + n * splat(2.12194440e-4f);
  const V8 r2 = r * r;
  V8 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  const V8 y = (p * r2 + r) + splat(1.0f);
  // 2^n as 2^(n >> 1) * 2^(n - (n >> 1)): both factors normal for n in [-151, 128], the first
  // product exact, the second rounded once (into the subnormals where it must).
  const I8 n1 = ni >> 1;
  return (y * pow2(n1)) * pow2(ni - n1);
}

RLM_VEC_INLINE V8 silu_mul8(V8 g, V8 u) { return g / (splat(1.0f) + exp8(-g)) * u; }

// Lanes [0, count) of p (count < 8), the rest filled with `fill`.
RLM_VEC_INLINE V8 load_partial(const float* p, int64_t count, float fill) {
  float buf[8];
  for (int l = 0; l < 8; ++l) buf[l] = fill;
  std::memcpy(buf, p, static_cast<size_t>(count) * sizeof(float));
  return load8(buf);
}

RLM_VEC_INLINE void store_partial(float* p, V8 v, int64_t count) {
  float buf[8];
  store8(buf, v);
  std::memcpy(p, buf, static_cast<size_t>(count) * sizeof(float));
}

RLM_VEC_INLINE float hsum(V8 v) { return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])); }

}  // namespace

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// AVX2 clones where the CPU has it: the same elementwise arithmetic in wider registers.
#define RLM_VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RLM_VEC_CLONES
#endif

RLM_VEC_CLONES void exp_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, exp8(load8(x + i)));
  if (i < n) store_partial(y + i, exp8(load_partial(x + i, n - i, 0.0f)), n - i);
}

RLM_VEC_CLONES MaxExpSum exp_minus_max(float* s, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // The max: lanewise, then across lanes (max is exact, so the order only matters for NaNs,
  // which a row of finite scores does not have).
  V8 mv = splat(kNegInf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 v = load8(s + i);
    mv = mv < v ? v : mv;
  }
  if (i < n) {
    const V8 v = load_partial(s + i, n - i, kNegInf);
    mv = mv < v ? v : mv;
  }
  float m = kNegInf;
  for (int l = 0; l < 8; ++l) m = m < mv[l] ? mv[l] : m;
  // Exponentials in place and their sum: 8 lanes of partial sums, then hsum.
  const V8 mm = splat(m);
  V8 acc = {};
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const V8 e = exp8(load8(s + i) - mm);
    store8(s + i, e);
    acc += e;
  }
  if (i < n) {
    // The padding lanes are left out of the sum.
    const V8 e = exp8(load_partial(s + i, n - i, kNegInf) - mm);
    store_partial(s + i, e, n - i);
    const I8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    acc += lane < static_cast<int32_t>(n - i) ? e : V8{};
  }
  return {m, hsum(acc)};
}

RLM_VEC_CLONES void silu_mul_f32(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, silu_mul8(load8(gate + i), load8(up + i)));
  if (i < n) {
    store_partial(out + i, silu_mul8(load_partial(gate + i, n - i, 0.0f), load_partial(up + i, n - i, 0.0f)),
                  n - i);
  }
}

}  // namespace rlm::cpu
