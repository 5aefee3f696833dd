// The all-reduce benchmark of a tensor-parallel group: the reference that tensor-parallel step
// times are read against (`bench one-batch --tp N` prints it). Every rank runs it at the same time
// (rank 0 starts the others through the step stream); each size is timed with the library (NCCL on
// GPUs) and, where the group has it, with the one-shot peer-to-peer kernel. Bus bandwidth follows
// nccl-tests: bytes / time * 2 (n - 1) / n.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/device.h"
#include "dist/communicator.h"

namespace rlm {

struct AllReduceTiming {
  size_t bytes = 0;
  std::string algo;  // "nccl" (the library; "tcp" on the CPU) or "one-shot"
  double us = 0.0;   // per call, eager back-to-back calls, rank 0's clock
  double bus_gbps = 0.0;
};

// Collective: every rank calls it with its own device. bf16 messages from 8 KB to 128 MB.
std::vector<AllReduceTiming> bench_all_reduce(Communicator& comm, Device device);
// The table rank 0 prints.
std::string format_all_reduce_timings(const std::vector<AllReduceTiming>& t, int ranks);

}  // namespace rlm
