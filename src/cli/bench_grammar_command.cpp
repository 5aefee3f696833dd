// `radixlm bench grammar` (the program: bench/grammar.h).
#include "bench/grammar.h"
#include "cli/commands.h"

namespace rlm::cli {

void add_bench_grammar_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<bench::GrammarBenchArgs>();
  CLI::App* s = bench.add_subcommand("grammar", "Constrained decoding's host cost per token: mask fill and accept");
  s->add_option("--tokenizer", a->tokenizer, "Tokenizer (tokenizer.json, tokenizer.model or .gguf)")->required();
  s->add_option("--schemas", a->schemas, "JSONL file of JSON schemas (tools/make_json_schemas.py)")->required();
  s->add_option("--steps", a->steps, "At most this many tokens per walk")->check(CLI::PositiveNumber);
  s->add_option("--seed", a->seed, "Seed of the random walks");
  s->add_option("--walks", a->walks_path, "Write each walk's schema and tokens (JSONL) for the xgrammar replay");
  s->add_option("--json", a->json_path, "Write the numbers to this JSON file");
  out.emplace_back(s, [a] { return bench::run_grammar(*a); });
}

}  // namespace rlm::cli
