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
// Calls alternate between two data areas by their number, so that no rank overwrites an area a
// peer still reads without a second meeting (the kernel's comment says why).
// The call numbers live in device memory, so a captured graph replays correctly. All ranks must
// make the same calls in the same order (as with NCCL), with the same sizes.
//
// car_all_reduce_add_rms_norm is the all-reduce of f32 rows followed by the fused add + RMSNorm
// of the pre-norm residual stream (cuda::fused_add_rms_norm), in one kernel that shares the
// buffers and call numbers: each rank writes its rows into its own slot of every rank's data area
// (a write over the link instead of a read round trip), the blocks meet, and each rank sums the
// slots from its own memory in rank order, then adds and normalises -- one launch and one
// round trip fewer than the two calls, with the same bits.
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

// Whether car_all_reduce_add_rms_norm takes these rows: contiguous f32 [rows, d], x and residual
// 16-byte aligned, d a multiple of 4 and at most 8,192 (RMSNorm's register kernel,
// kernels/cuda/rms_norm.cu, which gives the bits), and `size` slots of rows * d floats in one data
// area (size * rows * d * 4 <= max_bytes, about).
bool car_norm_fits(const void* x, const void* residual, int64_t rows, int64_t d, int size, size_t max_bytes);

// x = the ranks' rank-order f32 sum of x, then residual += x and x = rms_norm(residual) * weight --
// bit-identical to car_all_reduce(x) followed by cuda::fused_add_rms_norm(x, residual) -- in one
// kernel on `stream`. x, residual: contiguous f32 [rows, d] on `device` passing car_norm_fits;
// weight: [d] of weight_dtype (f32/bf16/f16); buffers, rank, size, max_bytes as car_all_reduce.
void car_all_reduce_add_rms_norm(int device, void* const* buffers, int rank, int size, size_t max_bytes,
                                 float* x, float* residual, int64_t rows, int64_t d, const void* weight,
                                 DType weight_dtype, float eps, void* stream);

}  // namespace rlm::cuda
