// `radixlm bench offline` (the program: bench/offline.h).
#include "bench/offline.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"

namespace rlm::cli {

void add_bench_offline_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  struct Args {
    EngineArgs engine;
    bench::OfflineArgs run;
  };
  auto a = std::make_shared<Args>();
  a->engine.load_format = "dummy";
  a->engine.page_size = 16;
  a->engine.chunked_prefill_size = 8192;
  a->engine.max_prefill_tokens = 16384;
  a->engine.max_running_requests = 64;           // the pool holds this many full contexts (below)
  a->engine.kv_from_memory = false;              // the pool holds the running requests, on CUDA too
  a->engine.check_integrity_when_idle = false;   // not inside the measured time
  CLI::App* s = bench.add_subcommand("offline", "In-process throughput on random prompts (no HTTP)");
  s->add_option("--num-prompts", a->run.num_prompts, "Requests")->check(CLI::PositiveNumber);
  s->add_option("--input-len", a->run.input_len, "Longest prompt")->check(CLI::PositiveNumber);
  s->add_option("--output-len", a->run.output_len, "Longest output")->check(CLI::PositiveNumber);
  s->add_option("--random-range-ratio", a->run.range_ratio, "Lengths are uniform in [len * ratio, len]")
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--dataset", a->run.dataset, "Read prompts and output lengths from this JSON");
  s->add_option("--dataset-out", a->run.dataset_out, "Write the prompts and output lengths as JSON");
  s->add_option("--result-out", a->run.result_out, "Write the result as JSON");
  EngineFlagOptions flags;
  flags.model_help = "Model directory or .gguf (configs/qwen3-0.6b with --load-format dummy)";
  flags.seed_help = "Seed for dummy weights and prompts";
  flags.context_help = "Context length (default: the longest request)";
  flags.running_help = "Decode batch limit";
  flags.tokenizer_flags = false;
  add_engine_flags(s, a->engine, flags);
  out.emplace_back(s, [a] { return bench::run_offline(a->engine, a->run); });
}

}  // namespace rlm::cli
