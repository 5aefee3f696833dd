#include "formats/gguf_dequant.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace rlm {

namespace {

constexpr int64_t kQk = 32;  // elements per Q8_0 / Q4_0 / Q4_1 block

float load_f16(const uint8_t* p) {
  f16 h;
  std::memcpy(&h.bits, p, 2);
  return f16_to_f32(h);
}

void dequant_q8_0(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 34, out += kQk) {
    const float d = load_f16(src);
    const auto* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int64_t j = 0; j < kQk; ++j) out[j] = static_cast<float>(q[j]) * d;
  }
}

void dequant_q4_0(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 18, out += kQk) {
    const float d = load_f16(src);
    const uint8_t* qs = src + 2;
    for (int64_t j = 0; j < kQk / 2; ++j) {
      out[j] = static_cast<float>(static_cast<int>(qs[j] & 0x0f) - 8) * d;
      out[j + kQk / 2] = static_cast<float>(static_cast<int>(qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, int64_t num_blocks, float* out) {
  for (int64_t b = 0; b < num_blocks; ++b, src += 20, out += kQk) {
    const float d = load_f16(src);
    const float m = load_f16(src + 2);
    const uint8_t* qs = src + 4;
    for (int64_t j = 0; j < kQk / 2; ++j) {
      out[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
      out[j + kQk / 2] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// Runs fn(first_block, num_blocks) over [0, num_blocks) on several threads for large tensors.
template <typename Fn>
void parallel_blocks(int64_t num_blocks, Fn fn) {
  constexpr int64_t kBlocksPerThread = 1 << 16;  // ~2M elements
  const int64_t max_threads = std::max<int64_t>(1, std::min<int64_t>(std::thread::hardware_concurrency(), 16));
  const int64_t n = std::min(max_threads, (num_blocks + kBlocksPerThread - 1) / kBlocksPerThread);
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

}  // namespace

bool gguf_can_dequantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: return true;
    default: return false;
  }
}

Status dequantize_to_f32(GgmlType type, std::span<const uint8_t> data, int64_t numel, float* out) {
  const uint32_t id = static_cast<uint32_t>(type);
  auto traits = ggml_type_traits(id);
  if (!traits) return unimplemented(str("unknown ggml type id ", id));
  if (!gguf_can_dequantize(type)) {
    return unimplemented(str("ggml type ", traits->name, " (id ", id,
                             ") is not supported; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1"));
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
  parallel_blocks(num_blocks, [=](int64_t first, int64_t count) {
    const uint8_t* s = src + first * block_bytes;
    float* o = out + first * block_elems;
    const size_t elems = static_cast<size_t>(count * block_elems);
    switch (type) {
      case GgmlType::kF32: std::memcpy(o, s, elems * 4); break;
      case GgmlType::kF16: convert_to_f32(s, DType::kF16, o, elems); break;
      case GgmlType::kBF16: convert_to_f32(s, DType::kBF16, o, elems); break;
      case GgmlType::kQ8_0: dequant_q8_0(s, count, o); break;
      case GgmlType::kQ4_0: dequant_q4_0(s, count, o); break;
      case GgmlType::kQ4_1: dequant_q4_1(s, count, o); break;
      default: break;  // unreachable: checked above
    }
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

}  // namespace rlm
