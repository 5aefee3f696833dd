// A captured CUDA graph on a device's stream, and the one kernel a replay needs besides it: copying
// the step's inputs into the graph's fixed buffers with padding. Host-only header.
#pragma once

#include <cstdint>

namespace rlm::cuda {

// Capture -> instantiate -> replay. Capture uses cudaStreamCaptureModeThreadLocal: a call that is
// illegal during capture (a host sync, a legacy-stream copy, cudaFree) on this thread invalidates
// it and the error surfaces at end_capture; other threads are not affected.
class CudaGraph {
 public:
  explicit CudaGraph(int device) : device_(device) {}
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Tells the device's CudaContext (scratch from the graph pool) and starts capturing its stream.
  void begin_capture();
  // Ends the capture and instantiates the graph; throws rlm::Error when the capture failed.
  void end_capture();
  // Ends a capture after an error (no throw); the object can capture again.
  void abort_capture() noexcept;
  // Launches the graph on the device's stream (asynchronous).
  void replay() const;
  bool ready() const { return exec_ != nullptr; }
  // Kernel nodes in the instantiated graph (for tests and logs).
  int64_t num_nodes() const { return num_nodes_; }

 private:
  int device_;
  bool capturing_ = false;
  void* exec_ = nullptr;  // cudaGraphExec_t
  int64_t num_nodes_ = 0;
};

// One i32 array to fill: dst[i] = src[i] for i < n_real, dst[i] = pad for n_real <= i < n_total.
struct PadCopy {
  int32_t* dst = nullptr;
  const int32_t* src = nullptr;  // may be nullptr when n_real == 0
  int32_t pad = 0;
};
inline constexpr int kMaxPadCopies = 8;

// All copies in one launch on the device's stream.
void copy_with_padding(int device, const PadCopy* copies, int num_copies, int64_t n_real, int64_t n_total);

}  // namespace rlm::cuda
