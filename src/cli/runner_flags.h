// The runner flags that serve, generate, bench one-batch and bench offline share: CUDA memory,
// CUDA graphs, cascade attention, FP8 weights and the KV-cache dtype.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/model_loader.h"
#include "engine/model_runner.h"

namespace rlm::cli {

struct RunnerFlags {
  double mem_fraction_static = 0.88;  // SGLang's default for large GPUs
  bool disable_cuda_graph = false;
  int64_t cuda_graph_max_bs = 160;    // SGLang's default on an H100
  std::string cascade_attention = "auto";
  std::string quantization;             // "" | "fp8"
  std::string kv_cache_dtype = "auto";  // auto | f32 | bf16 | f16 | fp8_e4m3

  // The KV pool dtype of --kv-cache-dtype: auto keeps f32 (the pool's long-standing default).
  static DType kv_dtype_of(const std::string& name) {
    if (name == "bf16" || name == "bfloat16") return DType::kBF16;
    if (name == "f16" || name == "float16") return DType::kF16;
    if (name == "fp8_e4m3" || name == "fp8") return DType::kF8E4M3;
    return DType::kF32;
  }

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
    app->add_option("--quantization", quantization,
                    "fp8: quantize the float projections to FP8 E4M3 at load (per-channel weight scales, dynamic "
                    "per-token activation scales; Llama/Qwen2/Qwen3). FP8 checkpoints load as they are without it")
        ->check(CLI::IsMember({"fp8"}));
    app->add_option("--kv-cache-dtype", kv_cache_dtype,
                    "KV cache dtype: auto (f32), f32, bf16, f16 or fp8_e4m3 (per-layer scales from the checkpoint, "
                    "else 1; twice the tokens of bf16 in the same memory)")
        ->check(CLI::IsMember({"auto", "f32", "float32", "bf16", "bfloat16", "f16", "float16", "fp8_e4m3", "fp8"}));
  }
  // The load options these flags set (--quantization).
  void apply_load(LoadOptions& lo) const { lo.quantization = quantization; }
  // Sets the runner's graph options and, when `size_from_memory`, sizes the KV pool from the memory
  // fraction (CUDA only; the CPU keeps the runner's own sizing).
  void apply(ModelRunnerConfig& rc, bool size_from_memory) const {
    rc.cuda_graph = !disable_cuda_graph;
    rc.cuda_graph_max_bs = cuda_graph_max_bs;
    rc.mem_fraction_static = size_from_memory ? mem_fraction_static : 0.0;
    rc.cascade_attention = parse_cascade_mode(cascade_attention).value();
    rc.kv_dtype = kv_dtype_of(kv_cache_dtype);
  }
};

}  // namespace rlm::cli
