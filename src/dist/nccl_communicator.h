// NcclCommunicator: collectives on CUDA tensors through NCCL, enqueued on the device's stream
// (so CUDA graphs capture them); all-reduces up to a few MB go through the one-shot peer-to-peer
// kernel instead when the group has it (decode's small messages, where NCCL's latency dominates). The NCCL
// unique id is made by rank 0 and sent over the group's TCP control plane (no other rendezvous). A watchdog
// thread watches the control connections and NCCL's asynchronous errors: when a rank is gone the process
// ends at once with an error naming the rank ("the tensor-parallel group failed"), since the step in flight
// waits for that rank on the GPU and can never finish. Compiled when CMake finds NCCL (RADIXLM_WITH_NCCL);
// without it make_nccl_communicator says so.
#pragma once

#include <memory>

#include "core/device.h"
#include "dist/communicator.h"
#include "dist/tcp_group.h"

namespace rlm {

// Collective: every rank of `group` calls it with its own CUDA device. one_shot: also set up the
// one-shot peer-to-peer all-reduce (kernels/cuda/custom_all_reduce.h) for small messages — only
// for ranks on one host; it is used when every rank can reach every other rank's GPU directly.
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(TcpGroup& group, Device device, bool one_shot);

// Whether this build has NCCL.
bool nccl_compiled();

}  // namespace rlm
