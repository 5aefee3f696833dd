// `radixlm bench one-batch` (the program: bench/one_batch.h).
#include "bench/one_batch.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"

namespace rlm::cli {

void add_bench_one_batch_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  struct Args {
    EngineArgs engine;
    bench::OneBatchArgs run;
  };
  auto a = std::make_shared<Args>();
  a->engine.load_format = "dummy";
  a->engine.page_size = 16;
  CLI::App* s = bench.add_subcommand("one-batch", "Static-batch prefill latency and decode step time");
  s->add_option("--batch-size", a->run.batch_size, "Requests in the batch")->check(CLI::PositiveNumber);
  s->add_option("--input-len", a->run.input_len, "Prompt tokens per request")->check(CLI::PositiveNumber);
  s->add_option("--output-len", a->run.output_len, "Tokens generated per request")->check(CLI::PositiveNumber);
  s->add_flag(
      "--profile-prefill", a->run.profile_prefill,
      "Open the profiler's capture range around the prefill steps after the first instead of the decode "
      "steps (tools/kernel_breakdown.sh PHASE=prefill; CUDA only, and nothing changes without a profiler "
      "attached)");
  s->add_option("--max-prefill-tokens", a->engine.max_prefill_tokens,
                "Most tokens per prefill step: a larger batch prefills in chunks like the server's (0: by GPU "
                "memory, 8192 on an 80 GB GPU and on the CPU)")
      ->check(CLI::NonNegativeNumber);
  EngineFlagOptions flags;
  flags.model_help = "Model directory or .gguf (configs/llama-3.1-8b with --load-format dummy)";
  flags.seed_help = "Seed for dummy weights and prompts";
  flags.context_help = "Context length (default: --input-len + --output-len)";
  flags.tokenizer_flags = false;
  flags.scheduler = false;  // a static batch straight on the model runner
  add_engine_flags(s, a->engine, flags);
  out.emplace_back(s, [a] { return bench::run_one_batch(a->engine, a->run); });
}

}  // namespace rlm::cli
