// AsyncDownload: a device-to-host copy that waits for itself only. The constructor queues the copy
// of `nbytes` at `src` (on `device`) into pinned host memory on the device's stream and records an
// event; wait() blocks until that copy has landed, not for work queued on the stream after it (so
// the scheduler reads a step's sampled tokens while the step launched after it runs). On the CPU
// it copies at once. Pinned blocks and events come from a process-wide pool and go back to it on
// destruction (cudaMallocHost is slow; a step needs a few bytes).
#pragma once

#include <cstddef>

#include "core/device.h"

namespace rlm {

class AsyncDownload {
 public:
  AsyncDownload(const void* src, Device device, size_t nbytes);
  ~AsyncDownload();
  AsyncDownload(const AsyncDownload&) = delete;
  AsyncDownload& operator=(const AsyncDownload&) = delete;
  // The copied bytes, once they have landed.
  const void* wait();

 private:
  Device device_;
  size_t capacity_ = 0;    // bytes of host_
  void* host_ = nullptr;   // pinned (CUDA) or malloc'ed (CPU) copy
  void* event_ = nullptr;  // cudaEvent_t
  bool waited_ = false;
};

}  // namespace rlm
