// The runner flags that serve, generate and bench one-batch share: CUDA memory, CUDA graphs,
// cascade attention.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/model_runner.h"
#include "engine/serving_limits.h"

namespace rlm::cli {

struct RunnerFlags {
  double mem_fraction_static = 0.88;  // SGLang's default for large GPUs
  bool disable_cuda_graph = false;
  int64_t cuda_graph_max_bs = 0;      // 0: by GPU memory (engine/serving_limits.h; 256 on an 80 GB GPU)
  std::string cascade_attention = "auto";

  void add_to(CLI::App* app) {
    app->add_option("--mem-fraction-static", mem_fraction_static,
                    "CUDA: fraction of GPU memory for weights + KV pool; the KV pool gets what the weights leave "
                    "(default 0.88)")
        ->check(CLI::Range(0.01, 0.99));
    app->add_flag("--disable-cuda-graph", disable_cuda_graph, "CUDA: run decode eagerly (no CUDA graphs)");
    app->add_option("--cuda-graph-max-bs", cuda_graph_max_bs,
                    "CUDA: largest decode batch captured as a CUDA graph (default: by GPU memory, 256 on an 80 GB "
                    "GPU; capped at the running request limit)")
        ->check(CLI::NonNegativeNumber);
    app->add_option("--cascade-attention", cascade_attention,
                    "extend steps: attend shared/cached prefixes in a separate pass merged by log-sum-exp; auto "
                    "(when adjacent requests share >= 64 prefix tokens), on (whenever a prefix is cached) or off "
                    "(default auto)")
        ->check(CLI::IsMember({"auto", "on", "off"}));
  }
  // Sets the runner's graph options and, when `size_from_memory`, sizes the KV pool from the memory
  // fraction (CUDA only; the CPU keeps the runner's own sizing).
  void apply(ModelRunnerConfig& rc, bool size_from_memory) const {
    rc.cuda_graph = !disable_cuda_graph;
    rc.cuda_graph_max_bs = cuda_graph_max_bs > 0 ? cuda_graph_max_bs
                                                  : default_serving_limits(hardware_info(rc.device), {}).cuda_graph_max_bs;
    rc.mem_fraction_static = size_from_memory ? mem_fraction_static : 0.0;
    rc.cascade_attention = parse_cascade_mode(cascade_attention).value();
  }
};

}  // namespace rlm::cli
