// CPU kernels of ops/token_ops.h (also the reference for the CUDA twins).
#pragma once

#include <cstdint>

namespace rlm::cpu {

void scatter_tokens(const int32_t* values, const int32_t* slots, int64_t n, int32_t* table);
void resolve_future_tokens(int32_t* ids, const int32_t* slots, int64_t n, const int32_t* table);
// out[i] = ids[i] - start when start <= ids[i] < start + count, else `outside`.
void shard_token_ids(const int32_t* ids, int64_t n, int32_t start, int32_t count, int32_t outside, int32_t* out);

}  // namespace rlm::cpu
