// Validation of device-resident index tensors (token ids, positions, cache slots) before a kernel
// writes anything: a check kernel records the first bad position in device memory, the host reads
// it back (one small synchronous copy) and throws a clear error. Not CUDA-graph-safe.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace rlm::cuda {

struct BadIndex {
  int64_t position = -1;  // -1: all indices are inside [0, limit)
  int64_t value = 0;
};

// idx: i32/i64 [n] on `device` (element stride `stride`). Returns the first position whose value
// is outside [0, limit). Holds the device context lock while it runs.
BadIndex find_out_of_range(int device, const void* idx, DType dtype, int64_t n, int64_t stride, int64_t limit);

}  // namespace rlm::cuda
