// `radixlm bench one-batch`: a static batch of `batch_size` requests of `input_len` random tokens —
// prefill latency, then `output_len` decode steps — timed in-process on the ModelRunner (no HTTP,
// no scheduler), with the decode step compared against its memory floor: (weight bytes + KV bytes
// read) / copy bandwidth measured in the same run on the same device.
#pragma once

#include <cstdint>

#include "engine/engine_args.h"

namespace rlm::bench {

struct OneBatchArgs {
  int64_t batch_size = 1;
  int64_t input_len = 512;
  int64_t output_len = 32;
  // CUDA: the profiler's capture range (Nsight Compute --profile-from-start off) covers the prefill
  // steps after the first (the only one when there is one) instead of the decode steps after the
  // first (tools/kernel_breakdown.sh, PHASE=prefill).
  bool profile_prefill = false;
};

// The model, device and runner settings come from `engine` (its context length defaults to
// input_len + output_len, its running-request limit is the batch size). Prints the report on
// stdout; returns the process exit code.
int run_one_batch(const EngineArgs& engine, const OneBatchArgs& args);

}  // namespace rlm::bench
