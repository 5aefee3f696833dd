// The runner flags that serve, generate and bench one-batch share: CUDA memory, CUDA graphs,
// cascade attention, CPU threads.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/model_runner.h"
#include "kernels/cpu/thread_pool.h"

namespace rlm::cli {

struct RunnerFlags {
  double mem_fraction_static = 0.88;  // SGLang's default for large GPUs
  bool disable_cuda_graph = false;
  int64_t cuda_graph_max_bs = 160;    // SGLang's default on an H100
  std::string cascade_attention = "auto";
  int threads = 0;  // CPU threads for the kernels; 0: all cores (or RADIXLM_CPU_THREADS)

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
    app->add_option("--cascade-attention", cascade_attention,
                    "extend steps: attend shared/cached prefixes in a separate pass merged by log-sum-exp; auto "
                    "(when adjacent requests share >= 64 prefix tokens), on (whenever a prefix is cached) or off "
                    "(default auto)")
        ->check(CLI::IsMember({"auto", "on", "off"}));
    app->add_option("--threads", threads, "CPU threads for the kernels (default: every core)")->check(CLI::PositiveNumber);
  }
  // Sets the runner's graph options and, when `size_from_memory`, sizes the KV pool from the memory
  // fraction (CUDA only; the CPU keeps the runner's own sizing).
  void apply(ModelRunnerConfig& rc, bool size_from_memory) const {
    rc.cuda_graph = !disable_cuda_graph;
    rc.cuda_graph_max_bs = cuda_graph_max_bs;
    rc.mem_fraction_static = size_from_memory ? mem_fraction_static : 0.0;
    rc.cascade_attention = parse_cascade_mode(cascade_attention).value();
    if (threads > 0) cpu::set_num_threads(threads);
  }
};

}  // namespace rlm::cli
