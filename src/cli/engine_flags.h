// The command-line flags of EngineArgs (engine/engine_args.h), registered in one place for every
// command that loads a model: serve, generate, chat, bench one-batch and bench offline. A flag's
// default is the value the command's EngineArgs holds when the flags are added (so each command sets
// its own defaults first, e.g. generate's page size 16 or the benchmarks' dummy weights); the few
// flags whose meaning differs per command take their name or wording from EngineFlagOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/engine_args.h"

namespace rlm::cli {

struct EngineFlagOptions {
  std::string model_help = "Model directory or .gguf file (default: the embedded SmolLM2)";
  bool model_positional = false;  // `radixlm serve MODEL`
  bool tokenizer_flags = true;    // --tokenizer, --chat-template (off for the benchmarks: token ids only)
  std::string seed_help = "Seed for dummy weights";
  // The context limit: `generate` calls it --max-context-len (0: from its prompts).
  std::string context_flag = "--context-length";
  std::string context_help = "Context length (default: the model's)";
  // The running-request limit: `generate` calls it --max-batch-size (0: every prompt at once).
  std::string running_flag = "--max-running-requests";
  std::string running_help =
      "Most requests decoding at once (0: by GPU memory, 512 on an 80 GB GPU, 64 on the CPU, lowered to KV "
      "tokens / 256)";
  // The scheduler's flags (off for bench one-batch, which runs a static batch on the runner).
  bool scheduler = true;
};

// Adds the engine flags, bound to `args` (which must outlive the parse).
void add_engine_flags(CLI::App* app, EngineArgs& args, const EngineFlagOptions& options = {});

// --page-size alone, for a benchmark of KV pages without a model (bench attention).
void add_page_size_flag(CLI::App* app, int64_t& page_size);

}  // namespace rlm::cli
