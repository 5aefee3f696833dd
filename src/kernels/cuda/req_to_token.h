// Device mirror updates of req_to_token (see ReqToTokenPool): one scatter per step instead of one
// copy per written run. Host-only header.
#pragma once

#include <cstdint>

namespace rlm::cuda {

// For every i < n: table[entries[2 i]] = entries[2 i + 1], on the device's stream.
//   table: i32 [table_numel] (device); entries: i64 [2 n] (device) pairs of (flat index, slot).
// A flat index outside [0, table_numel) or a slot outside [0, num_slots) is skipped and recorded
// in the device error record (see index_check.h) — the host validated both already.
void scatter_req_to_token(int device, int32_t* table, int64_t table_numel, const int64_t* entries, int64_t n,
                          int64_t num_slots);

}  // namespace rlm::cuda
