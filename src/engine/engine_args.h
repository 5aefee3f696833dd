// EngineArgs: everything that decides how a model is loaded and served — model and tokenizer files,
// device, KV cache, attention backends, CUDA graphs, scheduler limits — declared once for every
// command that loads a model (serve, generate, chat, bench one-batch, bench offline; their CLI flags
// are registered in cli/engine_flags.h) and converted here into the runner's and the scheduler's
// configs. A command with other defaults sets them in its EngineArgs before registering the flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "engine/serving_limits.h"
#include "dist/tp_group.h"

namespace rlm {

struct ModelConfig;
struct SchedulerConfig;

struct EngineArgs {
  // --- model files ---
  std::string model;          // directory or .gguf file; "": the embedded default model
  std::string tokenizer;      // "": the model's
  std::string chat_template;  // a Jinja file overriding the model's template; "": the model's
  std::string load_format = "auto";  // auto | safetensors | gguf | dummy
  uint64_t seed = 0;                 // dummy weights
  std::string dummy_weight_type;     // dummy: matrices as random blocks of this GGUF type (q4_k, ...); "": bf16
  std::string quantization;          // "" | "fp8": quantize float projections to FP8 at load

  // --- device and model runner ---
  std::string device = "auto";              // auto | cpu | cuda | cuda:N
  std::string attention_backend;            // "": native on CUDA, cpu on the CPU
  std::string prefill_attention_backend;    // "": attention_backend
  std::string decode_attention_backend;     // "": attention_backend
  std::string cascade_attention = "auto";   // auto | on | off
  int64_t page_size = 1;                    // KV page size in tokens
  std::string kv_cache_dtype = "auto";      // auto (auto_kv_dtype) | f32 | bf16 | f16 | fp8_e4m3
  int64_t context_length = 0;               // prompt + output limit; 0: the model's
  int64_t max_total_tokens = 0;             // KV capacity in tokens; 0: automatic (below)
  int64_t max_mamba_cache_size = 0;         // hybrid models: state slots; 0: 3 x max running requests
  double mem_fraction_static = 0.88;        // CUDA: weights + KV pool share of GPU memory
  bool disable_cuda_graph = false;
  bool disable_pdl = false;                 // CUDA: plain kernel launches (no programmatic dependent launch)
  int64_t cuda_graph_max_bs = 0;            // 0: by GPU memory (engine/serving_limits.h)
  int threads = 0;                          // CPU kernel threads (process-wide); 0: every core

  // --- tensor parallelism (dist/tp_group.h) ---
  int tp = 1;                  // --tp / --tensor-parallel-size: ranks (processes, one per GPU)
  int nnodes = 1;              // machines the ranks are spread over
  int node_rank = 0;           // this machine's index (0 runs the scheduler)
  std::string dist_init_addr;  // rank 0's HOST:PORT; "": a free local port (one node)
  bool disable_custom_all_reduce = false;  // NCCL for every all-reduce (no one-shot P2P kernel)

  // --- scheduler ---
  // 0: chosen for the hardware by with_limits_for() (engine/serving_limits.h); the running-request
  // limit is then also lowered to what the KV pool holds (build_engine).
  int64_t max_running_requests = 0;
  int64_t chunked_prefill_size = 0;
  int64_t max_prefill_tokens = 0;
  bool enable_mixed_chunk = true;        // mixed steps (scheduler_config.h)
  int64_t mixed_prefill_tokens = 0;      // most prompt tokens of a mixed step; 0: by the hardware
  std::string schedule_policy = "fcfs";  // fcfs | lpm
  std::string cache = "radix";           // radix | naive
  int64_t max_queued_requests = 4096;
  bool disable_overlap_schedule = false;
  bool check_integrity_when_idle = true;  // not a flag: the scheduler thread's idle self-check

  // --- automatic KV capacity (max_total_tokens == 0); per-command, not flags ---
  // On CUDA, size the pool from mem_fraction_static; else (and on the CPU) cpu_total_tokens, or
  // enough for max_running_requests requests of the full context when that is 0 too.
  bool kv_from_memory = true;
  int64_t cpu_total_tokens = 0;

  TpOptions tp_options() const;
  // The model path to load: `model`, or the embedded default.
  std::string model_path() const;
  // The tokenizer (and chat template) path: `tokenizer`, or the model path.
  std::string tokenizer_path() const;
  // Checks values and combinations that the flag parser cannot (device names, backend and policy
  // names, page size vs capacity, ...): kInvalidArgument naming the flag.
  Status validate() const;
  // The dummy weights' GGUF block type (nullopt: bf16); kInvalidArgument for a name that is not a
  // block type, or with another load format.
  StatusOr<std::optional<DType>> dummy_weight_dtype() const;
  // How load_model loads the weights under these args (--load-format, --seed, --quantization,
  // --dummy-weight-type).
  LoadOptions load_options() const;
  // These args with every limit left at 0 (running requests, prompt chunk, step token budget,
  // CUDA-graph batch) chosen for `hw`; the runner and scheduler configs take resolved args.
  EngineArgs with_limits_for(const HardwareInfo& hw) const;
  // The model's context length under these args.
  int64_t context_len(const ModelConfig& model) const;
  // The runner's config for `model` on `device` (a resolve_device() result).
  ModelRunnerConfig runner_config(const ModelConfig& model, Device device) const;
  // The scheduler's config for `model`.
  SchedulerConfig scheduler_config(const ModelConfig& model) const;
  // The automatic KV capacity rule in words (for --help).
  std::string kv_default_text() const;
};

// The KV pool's dtype under `--kv-cache-dtype auto`: on a CUDA device the model's dtype when it is
// bf16 or f16 (vLLM's auto), else f32 (the CPU kernels compute in f32; a 16-bit cache would only
// round what they stored).
DType auto_kv_dtype(const ModelConfig& model, Device device);

}  // namespace rlm
