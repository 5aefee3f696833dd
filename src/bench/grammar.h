// `radixlm bench grammar`: the host cost of grammar-constrained decoding per generated token, on
// a real vocabulary (default: the Llama-3 128k fixture). For every JSON schema of a JSONL file
// (tools/make_json_schemas.py) it compiles the grammar, then walks it: each step fills the
// allowed-token bitmask (timed), draws a random allowed token (seeded) and accepts it (timed),
// until the grammar terminates or --steps. The walks (schema + tokens) can be written out so that
// tools/bench_grammar_xgrammar.py replays exactly the same states through xgrammar's Python
// package and prints the ratio (docs/perf/structured_output.md). Also timed: applying one bitmask
// row to a row of logits (ops::apply_token_bitmask on the CPU).
#pragma once

#include <cstdint>
#include <string>

namespace rlm::bench {

struct GrammarBenchArgs {
  std::string tokenizer;   // tokenizer.json / tokenizer.model / .gguf
  std::string schemas;     // JSONL: one JSON schema per line
  int64_t steps = 256;     // at most this many tokens per walk
  uint64_t seed = 0;
  std::string walks_path;  // write {"schema", "tokens"} per line
  std::string json_path;   // write the summary
};

// Prints the report; returns the process exit code.
int run_grammar(const GrammarBenchArgs& args);

}  // namespace rlm::bench
