// TpGroup: the processes of one tensor-parallel group, one per GPU (or CPU process). Rank 0 — the
// serve / generate / bench process — listens on --dist-init-addr, starts the other ranks of its
// node (the same binary's hidden `tp-worker` command), and owns the group: its control plane
// (dist/tcp_group.h), its communicator (CPU or NCCL) and the step stream it sends. On a node
// other than the first, the command becomes rank node_rank * (tp / nnodes), starts the node's
// other ranks and serves nothing (dist/tp_worker.h). Ending the group (rank 0's destructor) tells
// every rank to stop and reaps the processes it started.
#pragma once

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "core/device.h"
#include "dist/communicator.h"
#include "dist/step_stream.h"
#include "dist/tcp_group.h"
#include "model/weight_source.h"

namespace rlm {

struct TpOptions {
  int tp = 1;                  // ranks in the group
  int nnodes = 1;              // machines; tp / nnodes ranks on each
  int node_rank = 0;           // this machine's index
  std::string dist_init_addr;  // rank 0's HOST:PORT; "": 127.0.0.1 and a free port (one node only)
  bool custom_all_reduce = true;  // one-shot peer-to-peer all-reduce for small messages (one node)
  int ranks_per_node() const { return tp / nnodes; }
  Status validate() const;
};

// The device rank `rank` uses when rank 0 runs on `root_device`: the CPU, or CUDA device
// root_device.index + the rank's index on its node.
Device rank_device(Device root_device, int rank, const TpOptions& o);

// The communicator for tensors on `device`: CpuCommunicator on the CPU, NcclCommunicator on CUDA
// (collective: every rank calls it; kUnimplemented when radixlm was built without NCCL), with the
// one-shot all-reduce when `one_shot` (TpOptions::custom_all_reduce on one node).
StatusOr<std::unique_ptr<Communicator>> make_communicator(TcpGroup& group, Device device, bool one_shot);

class TpGroup {
 public:
  // Rank 0: listens, starts this node's other ranks (`worker_binary tp-worker ...`; "": this
  // executable, or $RADIXLM_TP_WORKER_BINARY) and waits for every rank to connect.
  static StatusOr<std::shared_ptr<TpGroup>> start(const TpOptions& o, std::string worker_binary = "");
  // Any other rank: connects to rank 0 (and, the first rank of a node, starts the node's others).
  static StatusOr<std::shared_ptr<TpGroup>> join(const TpOptions& o, int rank, std::string worker_binary = "");
  ~TpGroup();

  int rank() const { return control_->rank(); }
  int size() const { return control_->size(); }
  TcpGroup& control() { return *control_; }
  // Creates the communicator for `device` (collective; every rank passes the same `one_shot`).
  Status init_communicator(Device device, bool one_shot);
  Communicator& comm() { return *comm_; }
  // What the model loader needs: this rank's shard and the communicator.
  TpShard shard() { return {rank(), size(), comm_.get()}; }
  // Rank 0 only: the step stream to the other ranks.
  StepSender& steps() { return *steps_; }

 private:
  TpGroup() = default;
  Status spawn_local_ranks(const TpOptions& o, int first_rank, const HostPort& root, const std::string& binary);

  std::unique_ptr<TcpGroup> control_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<StepSender> steps_;
  std::vector<pid_t> children_;
};

}  // namespace rlm
