// CpuCommunicator: collectives on host tensors over the group's TCP connections (dist/tcp_group.h),
// between processes of one machine or of several. Rank 0 receives every rank's tensor, sums them
// in f32 in rank order (one rounding to the tensor's dtype at the end) and sends the sum back, so
// every rank gets bit-identical values — a tensor-parallel model stays in lockstep.
#pragma once

#include "dist/communicator.h"
#include "dist/tcp_group.h"

namespace rlm {

class CpuCommunicator : public Communicator {
 public:
  explicit CpuCommunicator(TcpGroup& group) : group_(group) {}
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void all_reduce_sum(const Tensor& t) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void broadcast_bytes(std::vector<uint8_t>& bytes) override { group_.broadcast(bytes); }
  void barrier() override { group_.barrier(); }

 private:
  TcpGroup& group_;
  std::vector<float> sum_;        // rank 0: the f32 sum
  std::vector<uint8_t> scratch_;  // rank 0: one peer's tensor bytes
};

}  // namespace rlm
