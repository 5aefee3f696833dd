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

}  // namespace rlm::cpu
