// Subcommand registry for the radixlm binary.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace rlm::cli {

// Adds every subcommand (generate, info, ...) to `app`.
void register_commands(CLI::App& app);
// Runs the subcommand that was parsed; returns the process exit code.
int run_selected(CLI::App& app);

// Each subcommand file provides one of these; register_commands calls them all.
using Runner = std::function<int()>;
void add_info_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_generate_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_serve_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_chat_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_tp_worker_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out);
// `bench` with its modes; add_bench_command calls add_bench_serve_command (and later modes).
void add_bench_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_bench_serve_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_bench_one_batch_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_bench_offline_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_bench_attention_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_bench_gemv_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out);
void add_bench_grammar_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out);

}  // namespace rlm::cli
