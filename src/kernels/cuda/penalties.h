// CUDA twin of kernels/cpu/penalties.h, on the device's stream. The row settings and token lists
// come from the host (validated there by ops::apply_penalties) and are uploaded here in one staged
// copy, which does not wait for the device unless it exceeds core's 1 MiB staging limit (about
// 250k tokens over the penalised rows). The pending-slot tokens are read on the device.
#pragma once

#include <cstdint>

#include "kernels/cpu/penalties.h"

namespace rlm::cuda {

// logits: f32 [n, vocab] on `device` (row stride ld), in place. token_ids, offsets [n + 1] and
// rows [n]: host memory (may be freed on return). table: i32 on `device` (null when no row has a
// pending slot); a table token outside [0, vocab) is skipped. bias: host memory like the lists,
// added after the penalties. Rows without any penalty or bias are not touched; each such row uses
// vocab * 4 bytes of the context's scratch for its token counts.
void apply_penalties(int device, float* logits, int64_t n, int64_t vocab, int64_t ld, const int32_t* token_ids,
                     const int32_t* offsets, const cpu::PenaltyRow* rows, const int32_t* table,
                     const cpu::LogitBiasList& bias = {});

}  // namespace rlm::cuda
