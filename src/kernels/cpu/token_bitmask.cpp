#include "kernels/cpu/token_bitmask.h"

#include <limits>

namespace rlm::cpu {

void apply_token_bitmask(float* logits, int64_t vocab, int64_t ld, const int32_t* bitmask, int64_t words,
                         const int32_t* rows, int64_t m) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < m; ++j) {
    float* row = logits + rows[j] * ld;
    const uint32_t* mask = reinterpret_cast<const uint32_t*>(bitmask + j * words);
    for (int64_t t = 0; t < vocab; ++t) {
      if (((mask[t >> 5] >> (t & 31)) & 1u) == 0) row[t] = kMasked;
    }
  }
}

}  // namespace rlm::cpu
