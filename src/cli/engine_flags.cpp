#include "cli/engine_flags.h"

namespace rlm::cli {

void add_page_size_flag(CLI::App* app, int64_t& page_size) {
  app->add_option("--page-size", page_size, "KV page size in tokens")->check(CLI::PositiveNumber);
}

void add_engine_flags(CLI::App* app, EngineArgs& a, const EngineFlagOptions& o) {
  // Model files.
  app->add_option(o.model_positional ? "--model,model" : "--model", a.model, o.model_help);
  if (o.tokenizer_flags) {
    app->add_option("--tokenizer", a.tokenizer, "Tokenizer path when it differs from the model");
    app->add_option("--chat-template", a.chat_template, "A Jinja chat template file overriding the model's");
  }
  app->add_option("--load-format", a.load_format,
                  a.load_format == "dummy" ? "dummy (default) | auto | safetensors | gguf"
                                           : "auto | safetensors | gguf | dummy");
  app->add_option("--seed", a.seed, o.seed_help);
  app->add_option("--dummy-weight-type", a.dummy_weight_type,
                  "With --load-format dummy: matrices as random blocks of this GGUF type (q4_0, q8_0, q4_k, q6_k, ...)");
  app->add_option("--quantization", a.quantization,
                  "fp8: quantize the float projections to FP8 E4M3 at load (per-channel weight scales, dynamic "
                  "per-token activation scales; Llama/Qwen2/Qwen3). FP8 checkpoints load as they are without it")
      ->check(CLI::IsMember({"fp8"}));

  // Device and model runner.
  app->add_option("--device", a.device, "auto | cpu | cuda | cuda:N (auto: CUDA when a GPU is visible)");
  app->add_option("--attention-backend", a.attention_backend, "Attention backend (default: native on CUDA, cpu)");
  app->add_option("--prefill-attention-backend", a.prefill_attention_backend,
                  "Backend for prefill/extend steps (default: --attention-backend)");
  app->add_option("--decode-attention-backend", a.decode_attention_backend,
                  "Backend for decode steps (default: --attention-backend); two different names make 'hybrid'");
  app->add_option("--cascade-attention", a.cascade_attention,
                  "extend steps: attend shared/cached prefixes in a separate pass merged by log-sum-exp; auto "
                  "(when adjacent requests share >= 64 prefix tokens), on (whenever a prefix is cached) or off "
                  "(default auto)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  add_page_size_flag(app, a.page_size);
  app->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "KV cache dtype: auto (CUDA: the model's bf16/f16 dtype; CPU or f32 models: f32), f32, bf16, f16 or fp8_e4m3 (per-layer scales from the checkpoint, "
                  "else 1; twice the tokens of bf16 in the same memory)")
      ->check(CLI::IsMember({"auto", "f32", "float32", "bf16", "bfloat16", "f16", "float16", "fp8_e4m3", "fp8"}));
  app->add_option(o.context_flag, a.context_length, o.context_help)->check(CLI::NonNegativeNumber);
  app->add_option("--max-total-tokens", a.max_total_tokens, "KV cache capacity in tokens (" + a.kv_default_text() + ")")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-mamba-cache-size", a.max_mamba_cache_size,
                  "Hybrid linear-attention models: recurrent-state slots (working, tracking and cached snapshots; "
                  "0: 3 x " + o.running_flag + ")")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--mem-fraction-static", a.mem_fraction_static,
                  "CUDA: fraction of GPU memory for weights + KV pool; the KV pool gets what the weights leave "
                  "(default 0.88)")
      ->check(CLI::Range(0.01, 0.99));
  app->add_flag("--disable-cuda-graph", a.disable_cuda_graph, "CUDA: run decode eagerly (no CUDA graphs)");
  app->add_flag(
      "--disable-pdl", a.disable_pdl,
      "CUDA: launch kernels one after another without programmatic dependent launch (default: the "
      "decode step's kernels overlap their start with the previous kernel's end on Hopper and newer)");
  app->add_option("--cuda-graph-max-bs", a.cuda_graph_max_bs,
                  "CUDA: largest decode batch captured as a CUDA graph (0: by GPU memory, 256 on an 80 GB GPU; "
                  "capped at the running request limit)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--threads", a.threads, "CPU threads for the kernels (default: every core)")
      ->check(CLI::PositiveNumber);

  // Tensor parallelism.
  app->add_option("--tp,--tensor-parallel-size", a.tp,
                  "Tensor-parallel ranks: the model split over N processes, one per GPU (CUDA: cuda:0..N-1 from "
                  "--device; CPU: N processes). Rank 0 runs the scheduler (default 1)")
      ->check(CLI::PositiveNumber);
  app->add_option("--nnodes", a.nnodes, "Machines the --tp ranks are spread over (tp / nnodes on each; default 1)")
      ->check(CLI::PositiveNumber);
  app->add_option("--node-rank", a.node_rank,
                  "This machine's index among --nnodes (0 serves; the others run ranks only; default 0)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--dist-init-addr", a.dist_init_addr,
                  "HOST:PORT where rank 0 listens for the other ranks (needed with --nnodes > 1; default: a free "
                  "port on 127.0.0.1)");
  app->add_flag(
      "--disable-custom-all-reduce", a.disable_custom_all_reduce,
      "CUDA, --tp > 1 on one machine: every all-reduce through NCCL (default: messages up to a few MB "
      "through radixlm's one-shot peer-to-peer kernel when the GPUs reach each other directly)");
  if (!o.scheduler) return;

  // Scheduler.
  app->add_option(o.running_flag, a.max_running_requests, o.running_help)->check(CLI::NonNegativeNumber);
  app->add_option("--chunked-prefill-size", a.chunked_prefill_size,
                  "Most prompt tokens of one request per step (0: by GPU memory, 8192 on an 80 GB GPU, 2048 on "
                  "the CPU)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-prefill-tokens", a.max_prefill_tokens,
                  "Most new tokens in a step with prompt chunks, a mixed step's decode tokens included (0: by GPU "
                  "memory, 8192 on an 80 GB GPU and on the CPU)")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--enable-mixed-chunk,!--disable-mixed-chunk", a.enable_mixed_chunk,
                "Mixed steps: the decode tokens of the running requests and prompt chunks in one step (default "
                "on; --disable-mixed-chunk runs prompt chunks in steps of their own)");
  app->add_option("--mixed-prefill-tokens", a.mixed_prefill_tokens,
                  "Most prompt tokens in a mixed step, one that also carries decode tokens (0: 2048 on a GPU, "
                  "--max-prefill-tokens on the CPU); smaller values shorten the steps running streams wait through "
                  "while prompts arrive")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--schedule-policy", a.schedule_policy, "fcfs | lpm")->check(CLI::IsMember({"fcfs", "lpm"}));
  app->add_option("--cache", a.cache, "radix | naive")->check(CLI::IsMember({"radix", "naive"}));
  app->add_option("--max-queued-requests", a.max_queued_requests, "Queue limit (503 beyond)")
      ->check(CLI::PositiveNumber);
  app->add_flag("--disable-overlap-schedule", a.disable_overlap_schedule,
                "Run each decode step to completion before scheduling the next (no CPU/GPU overlap)");
}

}  // namespace rlm::cli
