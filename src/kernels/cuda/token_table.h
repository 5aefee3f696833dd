// CUDA twins of kernels/cpu/token_table.h, on the device's stream (no host synchronisation).
#pragma once

#include <cstdint>

namespace rlm::cuda {

void scatter_tokens(int device, const int32_t* values, const int32_t* slots, int64_t n, int32_t* table);
void resolve_future_tokens(int device, int32_t* ids, const int32_t* slots, int64_t n, const int32_t* table);
void shard_token_ids(int device, const int32_t* ids, int64_t n, int32_t start, int32_t count, int32_t outside,
                     int32_t* out);

}  // namespace rlm::cuda
