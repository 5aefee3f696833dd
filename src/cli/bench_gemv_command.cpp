// `radixlm bench gemv` (the program: bench/gemv.h).
#include "bench/gemv.h"
#include "cli/commands.h"

namespace rlm::cli {

void add_bench_gemv_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<bench::GemvArgs>();
  CLI::App* s = bench.add_subcommand("gemv", "CUDA small-m linears (Llama-3.1-8B shapes): GEMV kernel vs cuBLAS vs copy");
  s->add_option("--m", a->ms, "Rows of x (batch), comma-separated (default 1)")->delimiter(',');
  s->add_option(
      "--dtype", a->dtype,
      "Weight dtype: bf16 (default), f16, fp8_e4m3 (per-channel scales) or a GGUF block type (q4_k, ...)");
  s->add_option("--layers", a->layers, "Layers counted in the step total")->check(CLI::PositiveNumber);
  s->add_option("--iters", a->iters, "Timed cycles per measurement (median)")->check(CLI::PositiveNumber);
  s->add_option("--json", a->json_path, "Write the numbers to this JSON file");
  out.emplace_back(s, [a] { return bench::run_gemv(*a); });
}

}  // namespace rlm::cli
