// The CUDA memory and CUDA-graph flags that serve, generate and bench one-batch share.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/model_runner.h"

namespace rlm::cli {

struct RunnerFlags {
  double mem_fraction_static = 0.88;  // SGLang's default for large GPUs
  bool disable_cuda_graph = false;
  int64_t cuda_graph_max_bs = 160;    // SGLang's default on an H100

  void add_to(CLI::App* app) {
    app->add_option("--mem-fraction-static", mem_fraction_static,
                    "CUDA: fraction of GPU memory for weights + KV pool; the KV pool gets what the weights leave "
                    "(default 0.88)")
        ->check(CLI::Range(0.01, 0.99));
    app->add_flag("--disable-cuda-graph", disable_cuda_graph, "CUDA: run decode eagerly (no CUDA graphs)");
    app->add_option("--cuda-graph-max-bs", cuda_graph_max_bs,
                    "CUDA: largest decode batch captured as a CUDA graph (default 160; capped at the running "
                    "request limit)")
        ->check(CLI::PositiveNumber);
  }
  // Sets the runner's graph options and, when `size_from_memory`, sizes the KV pool from the memory
  // fraction (CUDA only; the CPU keeps the runner's own sizing).
  void apply(ModelRunnerConfig& rc, bool size_from_memory) const {
    rc.cuda_graph = !disable_cuda_graph;
    rc.cuda_graph_max_bs = cuda_graph_max_bs;
    rc.mem_fraction_static = size_from_memory ? mem_fraction_static : 0.0;
  }
};

}  // namespace rlm::cli
