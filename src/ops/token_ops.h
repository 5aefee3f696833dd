// Token-table ops for overlap scheduling: the runner keeps, per request slot, the token the last
// launched step sampled (in device memory), and the next step's inputs read it there instead of
// waiting for the host to see it. Slots are the runner's own request slots (validated on the host
// by the caller); the kernels do not read anything back.
#pragma once

#include "core/tensor.h"

namespace rlm::ops {

// table[slots[i]] = values[i] for every i.   values, slots: i32 [n] contiguous; table: i32 [m]
// contiguous; slots distinct, in [0, m); all on one device.
void scatter_tokens(const Tensor& values, const Tensor& slots, const Tensor& table);

// In place: ids[i] = table[slots[i]] where ids[i] < 0 (a token still being sampled on the device),
// otherwise unchanged.   ids, slots: i32 [n] contiguous; table: i32 [m] contiguous; one device.
void resolve_future_tokens(const Tensor& ids, const Tensor& slots, const Tensor& table);

// Token ids into a vocabulary shard's rows (tensor parallelism): out[i] = ids[i] - start when
// ids[i] is in [start, start + count), else `outside` (the shard's zero row).
//   ids, out: i32 [n] contiguous, one device.
void shard_token_ids(const Tensor& ids, int32_t start, int32_t count, int32_t outside, const Tensor& out);

}  // namespace rlm::ops
