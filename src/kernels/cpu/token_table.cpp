#include "kernels/cpu/token_table.h"

namespace rlm::cpu {

void scatter_tokens(const int32_t* values, const int32_t* slots, int64_t n, int32_t* table) {
  for (int64_t i = 0; i < n; ++i) table[slots[i]] = values[i];
}

void resolve_future_tokens(int32_t* ids, const int32_t* slots, int64_t n, const int32_t* table) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0) ids[i] = table[slots[i]];
  }
}

void shard_token_ids(const int32_t* ids, int64_t n, int32_t start, int32_t count, int32_t outside, int32_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t local = ids[i] - start;
    out[i] = local >= 0 && local < count ? local : outside;
  }
}

}  // namespace rlm::cpu
