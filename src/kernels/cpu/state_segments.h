// Host view of ops::StateSegments for the CPU kernels of the recurrent-state ops: plain i32
// arrays, already validated by the op (segments in range, slots in range and distinct).
#pragma once

#include <cstdint>

namespace rlm::cpu {

struct SegmentIndex {
  int64_t batch_size = 0;
  const int32_t* qo_indptr = nullptr;          // [batch_size + 1]
  const int32_t* state_slots = nullptr;        // [batch_size]
  const int32_t* has_initial_state = nullptr;  // [batch_size]
  const int32_t* track_slots = nullptr;        // [batch_size] or nullptr (no snapshots); -1: none
  const int32_t* track_lens = nullptr;         // [batch_size]

  int64_t begin(int64_t r) const { return qo_indptr[r]; }
  int64_t length(int64_t r) const { return qo_indptr[r + 1] - qo_indptr[r]; }
  // New tokens before request r's snapshot, or -1 when it takes none.
  int64_t track_len(int64_t r) const {
    return track_slots != nullptr && track_slots[r] >= 0 ? track_lens[r] : -1;
  }
};

}  // namespace rlm::cpu
