// Device facts the kernels' launch choices depend on, each asked of the runtime once and then
// remembered (the answers cannot change for a device): how many blocks of a kernel one
// multiprocessor holds, how many multiprocessors a device has, its compute capability and its
// opt-in shared memory a block.
// Host-only header.
#pragma once

#include <cstddef>

namespace rlm::cuda {

// Blocks of `kernel` (a __global__ function) that one multiprocessor of `device` holds at once,
// launched with `threads` threads a block and `smem` bytes of dynamic shared memory:
// cudaOccupancyMaxActiveBlocksPerMultiprocessor, asked once per (device, kernel, threads, smem).
// `device` must be the calling thread's current device (the query asks that one); a kernel that
// needs more than 48 KB of dynamic shared memory must have been opted in to it before the first
// query.
int resident_blocks_per_sm(int device, const void* kernel, int threads, size_t smem);

// The multiprocessor count of `device`, read once.
int multiprocessor_count(int device);

// The compute capability of `device` as major * 10 + minor (90 for sm_90), read once.
int compute_capability(int device);

// The most dynamic shared memory a block of `device` can opt in to (bytes), read once.
int shared_memory_optin(int device);

}  // namespace rlm::cuda
