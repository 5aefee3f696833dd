#include "cli/commands.h"

namespace rlm::cli {

namespace {
std::vector<std::pair<CLI::App*, Runner>>& runners() {
  static std::vector<std::pair<CLI::App*, Runner>> r;
  return r;
}
}  // namespace

void register_commands(CLI::App& app) {
  add_info_command(app, runners());
  add_generate_command(app, runners());
  add_serve_command(app, runners());
  add_chat_command(app, runners());
  add_tp_worker_command(app, runners());
  add_bench_command(app, runners());
  add_bench_attention_command(*app.get_subcommand("bench"), runners());  // `bench attention`
  add_bench_gemv_command(*app.get_subcommand("bench"), runners());       // `bench gemv`
  add_bench_grammar_command(*app.get_subcommand("bench"), runners());    // `bench grammar`
}

int run_selected(CLI::App& app) {
  for (auto& [sub, run] : runners()) {
    if (sub->parsed()) return run();
  }
  return 2;
}

}  // namespace rlm::cli
