// CUDA twin of kernels/cpu/top_logprobs.h, on the device's stream (no host synchronisation).
#pragma once

#include <cstdint>

namespace rlm::cuda {

// logprobs: f32 [n, vocab] (row stride ld); tokens: i32 [n]; chosen: f32 [n]; top_ids, top_values:
// [n, k] contiguous; all on `device`. Same results as cpu::top_logprobs bit for bit (the order is
// cpu::logprob_before); a token outside [0, vocab) gives a NaN chosen logprob (it cannot be checked
// on the host without a sync). One block per row runs k rounds of a block-wide arg-best over the
// candidates ranked after the previous pick: O(k * vocab) reads per row, meant for k <= ~64.
void top_logprobs(int device, const float* logprobs, int64_t n, int64_t vocab, int64_t ld, const int32_t* tokens,
                  int64_t k, float* chosen, int32_t* top_ids, float* top_values);

}  // namespace rlm::cuda
