// The ranks other than 0: what rank 0 sends them to build the same engine on their shard, and
// the hidden `radixlm tp-worker` entry point that runs one of them. Rank 0 sends two messages over
// the control plane: the model to load (path, load options, its device, kernel threads) and, once
// its own limits are resolved, the ModelRunner's config; then the step stream.
#pragma once

#include <memory>
#include <string>

#include "dist/tp_group.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"

namespace rlm {

// Rank 0: the group's settings for loading the model and making the communicator (one_shot: see
// make_communicator). Rank 0 itself then loads with `o.tp`.
void send_worker_load(TpGroup& group, const std::string& model_path, const LoadOptions& options,
                      Device root_device, int threads, bool one_shot);
// Rank 0: the runner's config (its device is rank 0's; each rank takes its own, rank_device()).
void send_worker_runner(TpGroup& group, const ModelRunnerConfig& config);

// A worker rank from start to rank 0's shutdown: joins the group, loads its shard, builds its
// runner and replays the step stream. Returns the process's exit status (errors on stderr).
int run_tp_worker(const TpOptions& options, int rank);

}  // namespace rlm
