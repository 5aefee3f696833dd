// Compiled with -ffp-contract=off (CMakeLists.txt): every product and sum is rounded separately,
// in the order numpy evaluates them, so the results are bit-identical to gguf.quants.dequantize.
#include "formats/gguf_dequant.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace rlm {

namespace {

constexpr int64_t kQk = 32;    // elements per 32-element block
constexpr int64_t kQkK = 256;  // elements per K-quant super-block

float load_f16(const uint8_t* p) {
  f16 h;
  std::memcpy(&h.bits, p, 2);
  return f16_to_f32(h);
}

void store_f16(uint8_t* p, float v) {
  const f16 h = f32_to_f16(v);
  std::memcpy(p, &h.bits, 2);
}

// Nibble j of a 16-byte array (low nibbles are elements 0-15, high nibbles 16-31).
inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const auto* q = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQk; ++j) y[j] = static_cast<float>(q[j]) * d;
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < kQk; ++j) y[j] = d * static_cast<float>(nibble(b + 2, j) - 8);
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  for (int j = 0; j < kQk; ++j) y[j] = d * static_cast<float>(nibble(b + 4, j)) + m;
}

inline int q5(const uint8_t* qh, const uint8_t* qs, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return nibble(qs, j) | static_cast<int>((h >> j) & 1u) << 4;
}

void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < kQk; ++j) y[j] = d * static_cast<float>(q5(b + 2, b + 6, j) - 16);
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  for (int j = 0; j < kQk; ++j) y[j] = d * static_cast<float>(q5(b + 4, b + 8, j)) + m;
}

void dequant_iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < kQk; ++j) y[j] = d * static_cast<float>(kIq4nlValues[nibble(b + 2, j)]);
}

void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int e = 0; e < kQkK; ++e) {
    const int q = qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
    const uint8_t s = scales[e / 16];
    const float dl = d * static_cast<float>(s & 15), ml = dmin * static_cast<float>(s >> 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// The 16 signed 6-bit scales of a Q3_K block (s - 32).
void q3_k_scales(const uint8_t* s, int* out) {
  for (int i = 0; i < 16; ++i) {
    const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
    const int high = s[8 + i % 4] >> (2 * (i / 4)) & 3;
    out[i] = (low | high << 4) - 32;
  }
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  int scales[16];
  q3_k_scales(b + 96, scales);
  const float d = load_f16(b + 108);
  for (int e = 0; e < kQkK; ++e) {
    const int low = qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
    const int q = low - ((hmask[e % 32] >> (e / 32) & 1) ? 0 : 4);
    const float dl = d * static_cast<float>(scales[e / 16]);
    y[e] = dl * static_cast<float>(q);
  }
}

// The eight 6-bit (scale, min) pairs of a Q4_K / Q5_K block.
void k_scale_min(const uint8_t* s, int b, int* sc, int* m) {
  if (b < 4) {
    *sc = s[b] & 63;
    *m = s[b + 4] & 63;
  } else {
    *sc = (s[b + 4] & 15) | (s[b - 4] >> 6) << 4;
    *m = (s[b + 4] >> 4) | (s[b] >> 6) << 4;
  }
}

void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* qs = b + 16;
  for (int sb = 0; sb < 8; ++sb) {
    int sc, m;
    k_scale_min(b + 4, sb, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int j = 0; j < 32; ++j) {
      const int q = qs[32 * (sb / 2) + j] >> (4 * (sb % 2)) & 15;
      y[32 * sb + j] = dl * static_cast<float>(q) - ml;
    }
  }
}

void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int sb = 0; sb < 8; ++sb) {
    int sc, m;
    k_scale_min(b + 4, sb, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int j = 0; j < 32; ++j) {
      const int q = (qs[32 * (sb / 2) + j] >> (4 * (sb % 2)) & 15) | (qh[j] >> sb & 1) << 4;
      y[32 * sb + j] = dl * static_cast<float>(q) - ml;
    }
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int e = 0; e < kQkK; ++e) {
    const int low = ql[64 * (e / 128) + e % 64] >> (4 * ((e / 64) % 2)) & 15;
    const int high = qh[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
    const float dl = d * static_cast<float>(scales[e / 16]);
    y[e] = dl * static_cast<float>((low | high << 4) - 32);
  }
}

void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int sb = 0; sb < 8; ++sb) {
    const int s = ((scales_l[sb / 2] >> (4 * (sb % 2))) & 15) | ((scales_h >> (2 * sb)) & 3) << 4;
    const float dl = d * static_cast<float>(s - 32);
    for (int j = 0; j < 32; ++j) y[32 * sb + j] = dl * static_cast<float>(kIq4nlValues[nibble(qs + 16 * sb, j)]);
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0: return dequant_q8_0;
    case DType::kQ4_0: return dequant_q4_0;
    case DType::kQ4_1: return dequant_q4_1;
    case DType::kQ5_0: return dequant_q5_0;
    case DType::kQ5_1: return dequant_q5_1;
    case DType::kIQ4_NL: return dequant_iq4_nl;
    case DType::kQ2_K: return dequant_q2_k;
    case DType::kQ3_K: return dequant_q3_k;
    case DType::kQ4_K: return dequant_q4_k;
    case DType::kQ5_K: return dequant_q5_k;
    case DType::kQ6_K: return dequant_q6_k;
    case DType::kIQ4_XS: return dequant_iq4_xs;
    default: return nullptr;
  }
}

// Runs fn(first_block, num_blocks) over [0, num_blocks) on several threads for large tensors.
template <typename Fn>
void parallel_blocks(int64_t num_blocks, int64_t block_elems, Fn fn) {
  const int64_t blocks_per_thread = (int64_t{1} << 21) / block_elems;  // ~2M elements
  const int64_t max_threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), 16));
  const int64_t n = std::min(max_threads, (num_blocks + blocks_per_thread - 1) / blocks_per_thread);
  if (n <= 1) {
    fn(0, num_blocks);
    return;
  }
  std::vector<std::thread> threads;
  const int64_t chunk = (num_blocks + n - 1) / n;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t first = t * chunk, count = std::min(chunk, num_blocks - first);
    if (count > 0) threads.emplace_back(fn, first, count);
  }
  for (auto& th : threads) th.join();
}

constexpr const char* kSupported = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

}  // namespace

std::optional<DType> dtype_of_ggml_type(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return DType::kF32;
    case GgmlType::kF16: return DType::kF16;
    case GgmlType::kBF16: return DType::kBF16;
    case GgmlType::kQ8_0: return DType::kQ8_0;
    case GgmlType::kQ4_0: return DType::kQ4_0;
    case GgmlType::kQ4_1: return DType::kQ4_1;
    case GgmlType::kQ5_0: return DType::kQ5_0;
    case GgmlType::kQ5_1: return DType::kQ5_1;
    case GgmlType::kIQ4_NL: return DType::kIQ4_NL;
    case GgmlType::kQ2_K: return DType::kQ2_K;
    case GgmlType::kQ3_K: return DType::kQ3_K;
    case GgmlType::kQ4_K: return DType::kQ4_K;
    case GgmlType::kQ5_K: return DType::kQ5_K;
    case GgmlType::kQ6_K: return DType::kQ6_K;
    case GgmlType::kIQ4_XS: return DType::kIQ4_XS;
    default: return std::nullopt;
  }
}

bool gguf_can_dequantize(GgmlType type) { return dtype_of_ggml_type(type).has_value(); }

void dequantize_row(DType dtype, const void* src, float* out, int64_t n) {
  if (!is_quantized(dtype)) {
    convert_to_f32(src, dtype, out, static_cast<size_t>(n));
    return;
  }
  const int64_t bs = dtype_block_size(dtype);
  const size_t bb = dtype_block_bytes(dtype);
  RLM_CHECK(n % bs == 0) << "dequantize_row: " << n << " elements of " << dtype_name(dtype)
                         << " are not a whole number of blocks";
  const BlockFn fn = block_fn(dtype);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / bs; ++b) fn(s + static_cast<size_t>(b) * bb, out + b * bs);
}

Status dequantize_to_f32(GgmlType type, std::span<const uint8_t> data, int64_t numel, float* out) {
  const uint32_t id = static_cast<uint32_t>(type);
  auto traits = ggml_type_traits(id);
  if (!traits) return unimplemented(str("unknown ggml type id ", id));
  const std::optional<DType> dtype = dtype_of_ggml_type(type);
  if (!dtype) {
    return unimplemented(str("ggml type ", traits->name, " (id ", id, ") is not supported; supported: ", kSupported));
  }
  if (numel < 0 || numel % traits->block_size != 0) {
    return invalid_argument(str("dequantize ", traits->name, ": ", numel, " elements is not a whole number of ",
                                traits->block_size, "-element blocks"));
  }
  const int64_t num_blocks = numel / traits->block_size;
  if (data.size() != static_cast<uint64_t>(num_blocks * traits->type_size)) {
    return invalid_argument(str("dequantize ", traits->name, ": ", numel, " elements need ",
                                num_blocks * traits->type_size, " bytes, got ", data.size()));
  }
  const uint8_t* src = data.data();
  const int64_t block_bytes = traits->type_size, block_elems = traits->block_size;
  const DType dt = *dtype;
  parallel_blocks(num_blocks, block_elems, [=](int64_t first, int64_t count) {
    dequantize_row(dt, src + first * block_bytes, out + first * block_elems, count * block_elems);
  });
  return Status::ok();
}

StatusOr<Tensor> dequantize_tensor(const GgufFile& file, const GgufTensorInfo& info) {
  Tensor out = Tensor::empty(info.shape, DType::kF32);
  Status st = dequantize_to_f32(info.type, file.tensor_data(info), info.numel(), out.data<float>());
  if (!st.is_ok()) {
    return Status(st.code(), str("gguf ", file.path(), ": tensor '", info.name, "': ", st.message()));
  }
  return out;
}

Tensor dequantize(const Tensor& t) {
  RLM_CHECK(t.device().is_cpu()) << "dequantize() is CPU-only; got " << t.describe();
  RLM_CHECK(is_floating(t.dtype()) || is_quantized(t.dtype())) << "dequantize() of " << t.describe();
  Tensor out = Tensor::empty(t.shape(), DType::kF32);
  if (t.numel() == 0) return out;
  const int64_t cols = t.size(-1), rows = t.numel() / cols;
  RLM_CHECK(t.stride(-1) == 1 || cols == 1) << "dequantize() needs a contiguous last dimension: " << t.describe();
  // Rows of a tensor with any leading shape: a contiguous copy of the leading dims first when
  // they are not uniformly strided.
  const Tensor src = t.dim() <= 2 ? t : t.contiguous();
  const int64_t row_stride = src.dim() >= 2 ? src.stride(-2) : cols;
  const auto* base = static_cast<const uint8_t*>(src.data_ptr());
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(src.dtype(), base + dtype_nbytes(src.dtype(), r * row_stride), o + r * cols, cols);
  }
  return out;
}

void fill_random_blocks(DType dtype, void* blocks, int64_t num_blocks, uint64_t seed, float scale) {
  RLM_CHECK(is_quantized(dtype)) << "fill_random_blocks of " << dtype_name(dtype);
  const size_t bb = dtype_block_bytes(dtype);
  auto* p = static_cast<uint8_t*>(blocks);
  std::mt19937_64 rng(seed);
  const size_t total = static_cast<size_t>(num_blocks) * bb;
  for (size_t i = 0; i < total; i += 8) {
    const uint64_t r = rng();
    std::memcpy(p + i, &r, std::min<size_t>(8, total - i));
  }
  std::uniform_real_distribution<float> u(0.5f, 1.0f);
  for (int64_t b = 0; b < num_blocks; ++b) {
    uint8_t* blk = p + static_cast<size_t>(b) * bb;
    const float sign = (rng() & 1) ? 1.0f : -1.0f;
    // The f16 scales, sized so that |x| <= ~scale (q ranges: see the layouts in the header).
    switch (dtype) {
      case DType::kQ8_0: store_f16(blk, sign * u(rng) * scale / 127); break;
      case DType::kQ4_0: store_f16(blk, sign * u(rng) * scale / 8); break;
      case DType::kQ4_1: store_f16(blk, u(rng) * scale / 8), store_f16(blk + 2, -u(rng) * scale); break;
      case DType::kQ5_0: store_f16(blk, sign * u(rng) * scale / 16); break;
      case DType::kQ5_1: store_f16(blk, u(rng) * scale / 16), store_f16(blk + 2, -u(rng) * scale); break;
      case DType::kIQ4_NL: store_f16(blk, sign * u(rng) * scale / 127); break;
      case DType::kQ2_K: store_f16(blk + 80, u(rng) * scale / 45), store_f16(blk + 82, u(rng) * scale / 15); break;
      case DType::kQ3_K: store_f16(blk + 108, sign * u(rng) * scale / 128); break;
      case DType::kQ4_K: store_f16(blk, u(rng) * scale / 504), store_f16(blk + 2, u(rng) * scale / 63); break;
      case DType::kQ5_K: store_f16(blk, u(rng) * scale / 1008), store_f16(blk + 2, u(rng) * scale / 63); break;
      case DType::kQ6_K: store_f16(blk + 208, sign * u(rng) * scale / 4096); break;
      case DType::kIQ4_XS: store_f16(blk, sign * u(rng) * scale / 4064); break;
      default: break;
    }
  }
}

}  // namespace rlm
