// Programmatic dependent launch (PDL; compute capability 9.0 and newer): the decode step's small
// kernels are launched so that the next kernel's blocks are scheduled while the previous kernel
// still runs, instead of after its last block ends; each such kernel waits (griddepcontrol.wait)
// before it touches memory the previous kernels write, so the results are the same with PDL on or
// off. A CUDA graph captures the programmatic edges. docs/perf/decode_kernels.md measures it.
// Host-only header.
#pragma once

#include <string>
#include <vector>

namespace rlm::cuda {

// Process-wide switch (default on); off, every kernel launches as a plain stream launch.
void set_pdl_enabled(bool enabled);
bool pdl_enabled();

// Whether kernels launched now on the calling thread's current device use PDL: the switch is on
// and the device has compute capability 9.0 or newer.
bool pdl_on_current_device();

// The kernel timeline of a profiling build (RADIXLM_KERNEL_TIMELINE; kernels/cuda/pdl.cuh records
// it in pdl_wait): one record per block of every kernel that waits, times from the GPU's global
// timer (ns). tools/timeline.py turns a dump into the step's kernels and what each adds to it.
struct TimelineRecord {
  unsigned long long t_enter = 0, t_wait = 0;                   // before and after griddepcontrol.wait
  unsigned grid = 0, block = 0, threads = 0, sm = 0, unit = 0;  // unit: set by timeline_dump
  unsigned mark[4] = {};                                        // ns after t_wait (0: not marked)
};
inline constexpr unsigned kTimelineMaxRecords = 1u << 16;  // per translation unit
// Whether this build records the timeline.
bool timeline_built();
// Forgets every record (synchronous; not during a capture).
void timeline_reset();
// Writes the records of the current device as CSV (unit,grid,block,threads,sm,t_enter,t_wait,
// mark0..3), the rows sorted by t_wait; returns the number of rows. A unit that made more than
// kTimelineMaxRecords records keeps its first ones; the dump says so on stderr.
size_t timeline_dump(const std::string& path);
// For pdl.cuh: a translation unit's record arrays (copy appends the kept records and returns how
// many the unit made).
int register_timeline_unit(const char* file, void (*reset)(), unsigned (*copy)(std::vector<TimelineRecord>&));

}  // namespace rlm::cuda
