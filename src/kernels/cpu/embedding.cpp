#include "kernels/cpu/embedding.h"

#include <cstring>
#include <vector>

#include "core/check.h"

namespace rlm::cpu {

void embedding(const int32_t* ids, int64_t num_tokens, const void* weight, DType weight_dtype,
               int64_t weight_stride, int64_t vocab_size, int64_t hidden, void* out, DType out_dtype,
               int64_t out_stride) {
  for (int64_t i = 0; i < num_tokens; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      fail(str("embedding: token id ", ids[i], " at position ", i, " is outside the vocabulary [0, ",
               vocab_size, ")"));
    }
  }
  const size_t w_es = dtype_size(weight_dtype);
  const size_t o_es = dtype_size(out_dtype);
  std::vector<float> row(weight_dtype == out_dtype ? 0 : static_cast<size_t>(hidden));
  for (int64_t i = 0; i < num_tokens; ++i) {
    const char* src = static_cast<const char*>(weight) + static_cast<size_t>(ids[i] * weight_stride) * w_es;
    char* dst = static_cast<char*>(out) + static_cast<size_t>(i * out_stride) * o_es;
    if (weight_dtype == out_dtype) {
      std::memcpy(dst, src, static_cast<size_t>(hidden) * w_es);
    } else {
      convert_to_f32(src, weight_dtype, row.data(), static_cast<size_t>(hidden));
      convert_from_f32(row.data(), dst, out_dtype, static_cast<size_t>(hidden));
    }
  }
}

}  // namespace rlm::cpu
