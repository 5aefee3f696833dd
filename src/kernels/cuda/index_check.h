// Validation of device-resident index tensors (token ids, positions, cache slots), two ways:
//
// - Immediate (the default, for ops called on their own): a check kernel records the first bad
//   position, the host reads it back (one small synchronous copy) and throws before the op writes
//   anything. Not CUDA-graph-safe.
// - Deferred (inside a DeferredIndexChecks scope — the ModelRunner's steps, CUDA-graph capture and
//   replay): no host sync. The op's own kernel skips every bad index and records the first one in
//   the device's error record; the host reads the record once per step (take_device_error, after
//   the step's results were copied back anyway) and throws then. The ModelRunner validates on the
//   host the indices that come from the host, so this is the safety net for device-made indices.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace rlm::cuda {

struct BadIndex {
  int64_t position = -1;  // -1: all indices are inside [0, limit)
  int64_t value = 0;
};

// idx: i32/i64 [n] on `device` (element stride `stride`). Returns the first position whose value
// is outside [0, limit). Holds the device context lock while it runs.
BadIndex find_out_of_range(int device, const void* idx, DType dtype, int64_t n, int64_t stride, int64_t limit);

// Which op recorded a deferred error.
enum class IndexErrorOp : int32_t { kNone = 0, kEmbedding = 1, kKvStore = 2, kRotary = 3, kKvIndices = 4,
                                    kReqToToken = 5 };

// The device error record (one per device, in device memory, zero when clean). Kernels claim it
// with atomicCAS on `op`; the first claimant fills the rest.
struct DeviceErrorRecord {
  int32_t op = 0;           // IndexErrorOp
  int32_t kv_indices = 0;   // build_kv_indices' error word (1 + the first bad request, 0 when fine)
  int64_t position = 0;
  int64_t value = 0;
  int64_t limit = 0;
};

// The record of `device` (allocated and zeroed on first use; never freed).
DeviceErrorRecord* device_error_record(int device);

// Token ids of an embedding lookup: i32 [n] (stride `stride`) on `device`, each in [0, vocab_size).
// Deferred mode: returns the device record for the kernel to fill. Otherwise checks them now (an
// error naming the first bad id and its position) and returns nullptr.
DeviceErrorRecord* check_token_ids(int device, const int32_t* ids, int64_t n, int64_t stride, int64_t vocab_size);

// Deferred mode for this host thread while an instance lives (nestable).
class DeferredIndexChecks {
 public:
  DeferredIndexChecks();
  ~DeferredIndexChecks();
  DeferredIndexChecks(const DeferredIndexChecks&) = delete;
  DeferredIndexChecks& operator=(const DeferredIndexChecks&) = delete;
  static bool active();
};

// Synchronises the device's stream, reads the record and, when an error was recorded, clears it
// and returns a message naming the op, the position and the value. Not inside a capture.
std::optional<std::string> take_device_error(int device);

// Without a sync: enqueue_error_readback queues a copy of the record into pinned host memory on the
// device's stream (call it at the end of a step); poll_device_error reads that host copy — current
// once the caller synchronised with the stream after the enqueue (e.g. by copying the step's logits
// to the host) — and, when it holds an error, clears both copies and returns the message.
void enqueue_error_readback(int device);
std::optional<std::string> poll_device_error(int device);

}  // namespace rlm::cuda
