// CUDA twin of kernels/cpu/token_bitmask.h, on the device's stream: one thread per (row, 32-token
// word); every pointer is device memory on `device`.
#pragma once

#include <cstdint>

namespace rlm::cuda {

void apply_token_bitmask(int device, float* logits, int64_t vocab, int64_t ld, const int32_t* bitmask, int64_t words,
                         const int32_t* rows, int64_t m);

}  // namespace rlm::cuda
