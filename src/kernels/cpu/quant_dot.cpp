#include "kernels/cpu/quant_dot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/check.h"

namespace rlm::cpu {

// ---- CPU features -----------------------------------------------------------------------------

namespace {

CpuIsa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  CpuIsa isa = CpuIsa::kScalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
    isa = CpuIsa::kAvx2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
      isa = CpuIsa::kAvx512;
    }
  }
  return isa;
#else
  return CpuIsa::kScalar;
#endif
}

}  // namespace

bool cpu_supports(CpuIsa isa) {
  static const CpuIsa hw = detect_isa();
  return static_cast<int>(isa) <= static_cast<int>(hw);
}

CpuIsa best_cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa best = detect_isa();
    if (const char* cap = std::getenv("RADIXLM_CPU_ISA")) {
      const std::string c = cap;
      if (c == "scalar") best = CpuIsa::kScalar;
      if (c == "avx2" && best == CpuIsa::kAvx512) best = CpuIsa::kAvx2;
    }
    return best;
  }();
  return isa;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

int64_t activation_block(DType weight_dtype) {
  switch (weight_dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kIQ4_NL: return 32;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS: return 256;
    default: fail(str("activation_block: ", dtype_name(weight_dtype), " is not a block-quantized weight dtype"));
  }
}

// ---- activation quantization ------------------------------------------------------------------

namespace {

// Round to nearest, ties to even (the SIMD paths' rounding), so every path gives the same q.
void quantize_row_q8_scalar(const float* x, int64_t k, int64_t block, int8_t* q, float* d, float* sum,
                            int16_t* bsums) {
  for (int64_t b = 0; b < k / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int64_t j = 0; j < block; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float db = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    d[b] = db;
    for (int64_t j = 0; j < block; ++j) q[b * block + j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
  }
  if (block == 32) {
    for (int64_t b = 0; b < k / 32; ++b) {
      int s = 0;
      for (int j = 0; j < 32; ++j) s += q[b * 32 + j];
      sum[b] = d[b] * static_cast<float>(s);
    }
  } else {
    for (int64_t g = 0; g < k / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += q[g * 16 + j];
      bsums[g] = static_cast<int16_t>(s);
    }
  }
}

}  // namespace

void quantize_activations(CpuIsa isa, const float* x, int64_t m, int64_t k, int64_t ldx, int64_t block,
                          Q8Activations* out) {
  RLM_CHECK(block == 32 || block == 256) << "activation block " << block;
  RLM_CHECK(k % block == 0) << "quantize_activations: k = " << k << " is not a multiple of " << block;
  out->m = m;
  out->k = k;
  out->block = block;
  out->q.resize(static_cast<size_t>(m * k));
  out->d.resize(static_cast<size_t>(m * (k / block)));
  out->sum.resize(block == 32 ? static_cast<size_t>(m * (k / 32)) : 0);
  out->bsums.resize(block == 256 ? static_cast<size_t>(m * (k / 16)) : 0);
  const int64_t nb = k / block;
  out->d4.assign(static_cast<size_t>((m + 3) / 4 * nb * 4), 0.0f);
  for (int64_t r = 0; r < m; ++r) {
    int8_t* q = out->q.data() + r * k;
    float* d = out->d.data() + r * (k / block);
    float* s = block == 32 ? out->sum.data() + r * (k / 32) : nullptr;
    int16_t* bs = block == 256 ? out->bsums.data() + r * (k / 16) : nullptr;
    if (isa != CpuIsa::kScalar) {
      quantize_row_q8_avx2(x + r * ldx, k, block, q, d, s, bs);
    } else {
      quantize_row_q8_scalar(x + r * ldx, k, block, q, d, s, bs);
    }
    float* d4 = out->d4.data() + (r / 4) * nb * 4 + r % 4;
    for (int64_t b = 0; b < nb; ++b) d4[b * 4] = d[b];
  }
}

// ---- scalar kernels ---------------------------------------------------------------------------

namespace {

float f16_at(const uint8_t* p) {
  f16 h;
  std::memcpy(&h.bits, p, 2);
  return f16_to_f32(h);
}

inline int nib(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }

// A 32-element block as integers: value = dw * v + mw.
struct Block32 {
  int v[32];
  float dw, mw;
};

// A 256-element super-block as integers: value = d * sc[e/16] * v - dmin * mn[e/16].
struct Block256 {
  int v[256];
  int sc[16], mn[16];
  float d, dmin;
};

template <DType T>
void decode32(const uint8_t* b, Block32& o) {
  o.dw = f16_at(b);
  o.mw = 0.0f;
  if constexpr (T == DType::kQ8_0) {
    for (int j = 0; j < 32; ++j) o.v[j] = static_cast<int8_t>(b[2 + j]);
  } else if constexpr (T == DType::kQ4_0) {
    for (int j = 0; j < 32; ++j) o.v[j] = nib(b + 2, j) - 8;
  } else if constexpr (T == DType::kQ4_1) {
    o.mw = f16_at(b + 2);
    for (int j = 0; j < 32; ++j) o.v[j] = nib(b + 4, j);
  } else if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
    const int off = T == DType::kQ5_1 ? 2 : 0;
    if (T == DType::kQ5_1) o.mw = f16_at(b + 2);
    uint32_t qh;
    std::memcpy(&qh, b + 2 + off, 4);
    for (int j = 0; j < 32; ++j) {
      o.v[j] = (nib(b + 6 + off, j) | static_cast<int>((qh >> j) & 1u) << 4) - (T == DType::kQ5_0 ? 16 : 0);
    }
  } else if constexpr (T == DType::kIQ4_NL) {
    static constexpr int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int j = 0; j < 32; ++j) o.v[j] = kv[nib(b + 2, j)];
  }
}

void k_scale_min(const uint8_t* s, int b, int* sc, int* m) {
  if (b < 4) {
    *sc = s[b] & 63;
    *m = s[b + 4] & 63;
  } else {
    *sc = (s[b + 4] & 15) | (s[b - 4] >> 6) << 4;
    *m = (s[b + 4] >> 4) | (s[b] >> 6) << 4;
  }
}

template <DType T>
void decode256(const uint8_t* b, Block256& o) {
  o.dmin = 0.0f;
  std::fill(o.mn, o.mn + 16, 0);
  if constexpr (T == DType::kQ2_K) {
    o.d = f16_at(b + 80);
    o.dmin = f16_at(b + 82);
    for (int s = 0; s < 16; ++s) o.sc[s] = b[s] & 15, o.mn[s] = b[s] >> 4;
    for (int e = 0; e < 256; ++e) o.v[e] = b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
  } else if constexpr (T == DType::kQ3_K) {
    const uint8_t* s = b + 96;
    o.d = f16_at(b + 108);
    for (int i = 0; i < 16; ++i) {
      const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
      o.sc[i] = (low | (s[8 + i % 4] >> (2 * (i / 4)) & 3) << 4) - 32;
    }
    for (int e = 0; e < 256; ++e) {
      const int low = b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
      o.v[e] = low - ((b[e % 32] >> (e / 32) & 1) ? 0 : 4);
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    o.d = f16_at(b);
    o.dmin = f16_at(b + 2);
    const uint8_t* qs = b + (T == DType::kQ5_K ? 48 : 16);
    for (int sb = 0; sb < 8; ++sb) {
      int sc, m;
      k_scale_min(b + 4, sb, &sc, &m);
      o.sc[2 * sb] = o.sc[2 * sb + 1] = sc;
      o.mn[2 * sb] = o.mn[2 * sb + 1] = m;
      for (int j = 0; j < 32; ++j) {
        int q = qs[32 * (sb / 2) + j] >> (4 * (sb % 2)) & 15;
        if (T == DType::kQ5_K) q |= (b[16 + j] >> sb & 1) << 4;
        o.v[32 * sb + j] = q;
      }
    }
  } else if constexpr (T == DType::kQ6_K) {
    o.d = f16_at(b + 208);
    for (int s = 0; s < 16; ++s) o.sc[s] = static_cast<int8_t>(b[192 + s]);
    for (int e = 0; e < 256; ++e) {
      const int low = b[64 * (e / 128) + e % 64] >> (4 * ((e / 64) % 2)) & 15;
      const int high = b[128 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
      o.v[e] = (low | high << 4) - 32;
    }
  } else if constexpr (T == DType::kIQ4_XS) {
    static constexpr int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    o.d = f16_at(b);
    uint16_t sh;
    std::memcpy(&sh, b + 2, 2);
    for (int sb = 0; sb < 8; ++sb) {
      const int s = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((sh >> (2 * sb)) & 3) << 4;
      o.sc[2 * sb] = o.sc[2 * sb + 1] = s - 32;
      for (int j = 0; j < 32; ++j) o.v[32 * sb + j] = kv[nib(b + 8 + 16 * sb, j)];
    }
  }
}

template <DType T>
void scalar_dot32(const uint8_t* w, size_t ldw, int64_t n, const Q8View& a, int nr, float* out, int64_t ldo) {
  const int64_t nb = a.k / 32;
  const size_t bb = dtype_block_bytes(T);
  Block32 blk;
  for (int64_t j = 0; j < n; ++j) {
    float acc[kMaxDotRows] = {}, corr[kMaxDotRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      decode32<T>(w + j * ldw + static_cast<size_t>(b) * bb, blk);
      for (int r = 0; r < nr; ++r) {
        const int8_t* q = a.q + r * a.k + b * 32;
        int isum = 0;
        for (int e = 0; e < 32; ++e) isum += blk.v[e] * q[e];
        acc[r] += blk.dw * a.d[r * nb + b] * static_cast<float>(isum);
        corr[r] += blk.mw * a.sum[r * nb + b];
      }
    }
    for (int r = 0; r < nr; ++r) out[r * ldo + j] = acc[r] + corr[r];
  }
}

template <DType T>
void scalar_dot256(const uint8_t* w, size_t ldw, int64_t n, const Q8View& a, int nr, float* out, int64_t ldo) {
  const int64_t nb = a.k / 256;
  const size_t bb = dtype_block_bytes(T);
  Block256 blk;
  for (int64_t j = 0; j < n; ++j) {
    float acc[kMaxDotRows] = {};
    for (int64_t b = 0; b < nb; ++b) {
      decode256<T>(w + j * ldw + static_cast<size_t>(b) * bb, blk);
      for (int r = 0; r < nr; ++r) {
        const int8_t* q = a.q + r * a.k + b * 256;
        const int16_t* bs = a.bsums + r * (a.k / 16) + b * 16;
        int isum = 0, imin = 0;
        for (int s = 0; s < 16; ++s) {
          int part = 0;
          for (int e = 16 * s; e < 16 * s + 16; ++e) part += blk.v[e] * q[e];
          isum += blk.sc[s] * part;
          imin += blk.mn[s] * bs[s];
        }
        const float da = a.d[r * nb + b];
        acc[r] += blk.d * da * static_cast<float>(isum) - blk.dmin * da * static_cast<float>(imin);
      }
    }
    for (int r = 0; r < nr; ++r) out[r * ldo + j] = acc[r];
  }
}

}  // namespace

QuantDotFn scalar_dot_kernel(DType wtype) {
  switch (wtype) {
    case DType::kQ8_0: return scalar_dot32<DType::kQ8_0>;
    case DType::kQ4_0: return scalar_dot32<DType::kQ4_0>;
    case DType::kQ4_1: return scalar_dot32<DType::kQ4_1>;
    case DType::kQ5_0: return scalar_dot32<DType::kQ5_0>;
    case DType::kQ5_1: return scalar_dot32<DType::kQ5_1>;
    case DType::kIQ4_NL: return scalar_dot32<DType::kIQ4_NL>;
    case DType::kQ2_K: return scalar_dot256<DType::kQ2_K>;
    case DType::kQ3_K: return scalar_dot256<DType::kQ3_K>;
    case DType::kQ4_K: return scalar_dot256<DType::kQ4_K>;
    case DType::kQ5_K: return scalar_dot256<DType::kQ5_K>;
    case DType::kQ6_K: return scalar_dot256<DType::kQ6_K>;
    case DType::kIQ4_XS: return scalar_dot256<DType::kIQ4_XS>;
    default: fail(str("quant_dot: ", dtype_name(wtype), " is not a block-quantized weight dtype"));
  }
}

namespace {

// Activation rows [r0, r0 + nr) of `a` as the kernels of `wtype` read them.
Q8View view_rows(const char* what, DType wtype, const Q8Activations& a, int64_t r0, int nr) {
  RLM_CHECK(nr >= 1 && nr <= kMaxDotRows && r0 + nr <= a.m && r0 % kMaxDotRows == 0)
      << what << ": rows " << r0 << "+" << nr;
  RLM_CHECK_EQ(a.block, activation_block(wtype));
  return {a.row_q(r0),
          a.row_d(r0),
          a.block == 32 ? a.row_sum(r0) : nullptr,
          a.block == 256 ? a.row_bsums(r0) : nullptr,
          a.group_d4(r0),
          a.k};
}

}  // namespace

void quant_dot_rows(CpuIsa isa, DType wtype, const uint8_t* w, size_t w_row_bytes, int64_t n,
                    const Q8Activations& a, int64_t r0, int nr, float* out, int64_t ldo) {
  QuantDotFn fn = nullptr;
  if (isa == CpuIsa::kAvx512) fn = avx512_dot_kernel(wtype);
  if (fn == nullptr && isa != CpuIsa::kScalar) fn = avx2_dot_kernel(wtype);
  if (fn == nullptr) fn = scalar_dot_kernel(wtype);
  const Q8View v = view_rows("quant_dot_rows", wtype, a, r0, nr);
  fn(w, w_row_bytes, n, v, nr, out, ldo);
}

size_t unpacked_row_bytes(CpuIsa isa, DType wtype, int64_t k) {
  if (isa == CpuIsa::kScalar) return 0;
  size_t block_bytes = 0;
  if (x86_unpack_fn(wtype, &block_bytes) == nullptr) return 0;
  return block_bytes * static_cast<size_t>(k / dtype_block_size(wtype));
}

void quant_unpack_rows(CpuIsa isa, DType wtype, const uint8_t* w, size_t w_row_bytes, int64_t n, int64_t k,
                       uint8_t* out) {
  size_t block_bytes = 0;
  const UnpackFn fn = isa == CpuIsa::kScalar ? nullptr : x86_unpack_fn(wtype, &block_bytes);
  RLM_CHECK(fn != nullptr) << "quant_unpack_rows: no unpacked kernel for " << dtype_name(wtype) << " on "
                           << cpu_isa_name(isa);
  fn(w, w_row_bytes, n, k / dtype_block_size(wtype), out);
}

void quant_dot_unpacked_rows(CpuIsa isa, DType wtype, const uint8_t* wu, int64_t n, const Q8Activations& a,
                             int64_t r0, int nr, float* out, int64_t ldo) {
  QuantDotFn fn = nullptr;
  if (isa == CpuIsa::kAvx512) fn = avx512_unpacked_dot_kernel(wtype);
  if (fn == nullptr && isa != CpuIsa::kScalar) fn = avx2_unpacked_dot_kernel(wtype);
  RLM_CHECK(fn != nullptr) << "quant_dot_unpacked_rows: no unpacked kernel for " << dtype_name(wtype)
                           << " on " << cpu_isa_name(isa);
  const Q8View v = view_rows("quant_dot_unpacked_rows", wtype, a, r0, nr);
  fn(wu, unpacked_row_bytes(isa, wtype, a.k), n, v, nr, out, ldo);
}

}  // namespace rlm::cpu
