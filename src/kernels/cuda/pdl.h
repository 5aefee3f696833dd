// Programmatic dependent launch (PDL; compute capability 9.0 and newer): the decode step's small
// kernels are launched so that the next kernel's blocks are scheduled while the previous kernel
// still runs, instead of after its last block ends; each such kernel waits (griddepcontrol.wait)
// before it touches memory the previous kernels write, so the results are the same with PDL on or
// off. A CUDA graph captures the programmatic edges. docs/perf/decode_kernels.md measures it.
// Host-only header.
#pragma once

namespace rlm::cuda {

// Process-wide switch (default on); off, every kernel launches as a plain stream launch.
void set_pdl_enabled(bool enabled);
bool pdl_enabled();

// Whether kernels launched now on the calling thread's current device use PDL: the switch is on
// and the device has compute capability 9.0 or newer.
bool pdl_on_current_device();

}  // namespace rlm::cuda
