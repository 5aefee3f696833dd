// One-shot all-reduce between the GPUs of one host over peer-to-peer memory (NVLink or PCIe P2P),
// for the small messages of tensor-parallel decode, where NCCL's per-call latency dominates
// (vLLM's and SGLang's "custom all-reduce" idea; our own code).
//
// Every rank owns one buffer (car_buffer_bytes(max_bytes)) that all ranks map: a signal area and a
// data area. One call is one kernel on the caller's stream — so CUDA graphs capture it — where
// block b of every rank
//   1. copies its share of the input into its own data area,
//   2. meets block b of every other rank (each writes a counter into the others' signal areas with
//      release semantics and waits for theirs with acquire semantics),
//   3. sums the ranks' copies of its share in rank order 0..size-1 in f32 and writes the result
//      over the input (so every rank gets bit-identical sums).
// Calls alternate between two data areas, so that no rank overwrites an area a peer still reads
// without a second meeting (the kernel's comment says why).
// The counters live in device memory and count calls, so a captured graph replays correctly. All
// ranks must make the same calls in the same order (as with NCCL), with the same sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace rlm::cuda {

inline constexpr int kCarMaxRanks = 8;

// Bytes of one rank's buffer for messages up to max_bytes.
size_t car_buffer_bytes(size_t max_bytes);
// A zeroed buffer of `bytes` on `device` (cudaMalloc, so it can be shared over CUDA IPC).
void* car_alloc(int device, size_t bytes);
void car_free(int device, void* buffer);
// The CUDA IPC handle of a car_alloc buffer, and a peer's buffer mapped into this process.
std::vector<uint8_t> car_ipc_handle(int device, void* buffer);
void* car_open_ipc(int device, const std::vector<uint8_t>& handle);
void car_close_ipc(int device, void* mapped);
// Whether `device` can read and write `peer_device`'s memory directly.
bool car_peer_access(int device, int peer_device);
// Lets `device` access `peer_device` (for peers in one process, as the kernel test has them).
void car_enable_peer_access(int device, int peer_device);

// Whether a message fits the one-shot path: f32/bf16/f16, a multiple of 16 bytes, 16-byte aligned,
// at most max_bytes.
bool car_fits(const void* data, int64_t numel, DType dtype, size_t max_bytes);

// data = sum over ranks of data, in place. buffers[r]: rank r's buffer (car_buffer_bytes(max_bytes))
// as mapped here (buffers[rank] is this rank's own); size in [2, kCarMaxRanks]; the message must
// pass car_fits(..., max_bytes); `stream` a cudaStream_t.
void car_all_reduce(int device, void* const* buffers, int rank, int size, size_t max_bytes, void* data,
                    int64_t numel, DType dtype, void* stream);

}  // namespace rlm::cuda
