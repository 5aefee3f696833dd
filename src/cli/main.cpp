// radixlm — command-line entry point. Each subcommand lives in its own cli/*.cpp file and
// registers itself here.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"radixlm — LLM inference and serving engine"};
  app.require_subcommand(1);
  rlm::cli::register_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return rlm::cli::run_selected(app);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "radixlm: error: %s\n", e.what());
    return 1;
  }
}
