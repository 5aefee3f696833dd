// Communicator: the collectives a tensor-parallel model needs, on the tensors of one rank. Every
// rank of the group calls the same collectives in the same order. Implementations: CpuCommunicator
// (host tensors, over the TcpGroup; bit-identical sums on every rank) and NcclCommunicator (CUDA
// tensors, NCCL on the device's stream; compiled when NCCL is found). A rank that is gone makes
// the call throw GroupError (dist/tcp_group.h) instead of waiting forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace rlm {

// Which algorithm all_reduce_sum uses. kAuto: the communicator's choice (NcclCommunicator: its
// one-shot peer-to-peer kernel for small messages when the group has one, else NCCL); the others
// force one, for the collectives benchmark (dist/collectives_bench.h).
enum class AllReduceMode { kAuto, kLibrary, kOneShot };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // t = sum over ranks of t, in place. t: contiguous f32/bf16/f16 on this rank's device.
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // out = the ranks' `in` stacked along dim 0 in rank order.
  //   in: contiguous [m, ...]; out: contiguous [size * m, ...] of in's dtype and device.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // Rank 0's bytes to every rank (in place; the others' input is ignored).
  virtual void broadcast_bytes(std::vector<uint8_t>& bytes) = 0;
  // Returns once every rank has called it (and, on a device, its queued work is done).
  virtual void barrier() = 0;
  // The largest message (bytes) of the one-shot all-reduce; 0 when the group has none. The same
  // on every rank.
  virtual size_t one_shot_max_bytes() const { return 0; }
  // Every rank sets the same mode (kOneShot only when one_shot_max_bytes() > 0).
  virtual void set_all_reduce_mode(AllReduceMode /*mode*/) {}
  // all_reduce_sum(x) followed by the pre-norm residual stream's fused add + RMSNorm (residual +=
  // x; x = rms_norm(residual) * weight, as ops::fused_add_rms_norm) in one step, where the
  // communicator has a fused path for these tensors (NcclCommunicator: its one-shot kernel, same
  // bits as the two calls). Returns false -- the same on every rank, nothing done -- otherwise.
  //   x, residual: contiguous f32 [m, d] on this rank's device; weight: [d] f32/bf16/f16 there.
  virtual bool all_reduce_add_rms_norm(const Tensor& /*x*/, const Tensor& /*residual*/,
                                       const Tensor& /*weight*/, float /*eps*/) {
    return false;
  }
};

// out = the ranks' `in` side by side along the last dimension (the vocab-parallel LM head's
// logits): all_gather into a [size, m, k] buffer, then one strided copy.
//   in: contiguous [m, k]; out: [m, size * k] of in's dtype and device.
void all_gather_last_dim(Communicator& comm, const Tensor& in, const Tensor& out);

}  // namespace rlm
