// `radixlm chat`: an interactive terminal chat with history, rendered with the model's chat
// template and streamed token by token. /reset clears the history, /exit (or EOF) quits.
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "server/engine_builder.h"

namespace rlm::cli {

namespace {

struct ChatArgs {
  EngineArgs engine;
  std::string system;
  int64_t max_tokens = 512;
  float temperature = 0.7f;
  float top_p = 0.9f;
  int32_t top_k = -1;
  bool seeded = false;

  ChatArgs() {
    engine.page_size = 16;
    engine.max_running_requests = 2;
    engine.check_integrity_when_idle = false;  // the scheduler idles while the user types
  }
};

int run_chat(const ChatArgs& a) {
  if (Status st = a.engine.validate(); !st.is_ok()) {
    std::fprintf(stderr, "radixlm chat: %s\n", st.message().c_str());
    return 2;
  }
  auto files = load_engine_files(a.engine, TokenizerUse::kRequired);
  if (!files.is_ok()) {
    std::fprintf(stderr, "radixlm chat: %s\n", files.status().to_string().c_str());
    return 1;
  }
  if (!files->chat_template) {
    std::fprintf(stderr, "radixlm chat: this model has no chat template\n");
    return 1;
  }
  auto built = build_engine(a.engine, std::move(files).value());
  if (!built.is_ok()) {
    std::fprintf(stderr, "radixlm chat: %s\n", built.status().to_string().c_str());
    return 1;
  }
  ServingEngine& engine = **built;
  engine.start();
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  if (!a.system.empty()) history.push_back({{"role", "system"}, {"content", a.system}});
  std::fprintf(stderr, "radixlm chat with %s — /reset clears the history, /exit quits\n", engine.model_name().c_str());
  int turn = 0;
  std::string line;
  while (true) {
    std::printf(">>> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      history = nlohmann::ordered_json::array();
      if (!a.system.empty()) history.push_back({{"role", "system"}, {"content", a.system}});
      std::printf("(history cleared)\n");
      continue;
    }
    if (line.empty()) continue;
    history.push_back({{"role", "user"}, {"content", line}});
    auto rendered = engine.render_chat(history, nullptr, true, nullptr);
    if (!rendered.is_ok()) {
      std::printf("error: %s\n", rendered.status().message().c_str());
      history.erase(history.end() - 1);
      continue;
    }
    std::vector<int32_t> ids = engine.encode(*rendered, /*add_special_tokens=*/false);
    SamplingParams p;
    p.temperature = a.temperature;
    p.top_p = a.top_p;
    p.top_k = a.top_k;
    if (a.seeded) p.seed = a.engine.seed + static_cast<uint64_t>(turn);
    p.max_new_tokens = std::min<int64_t>(a.max_tokens, engine.max_context_len() - static_cast<int64_t>(ids.size()));
    if (p.max_new_tokens < 1) {
      std::printf("error: the conversation no longer fits in the context (%lld tokens); /reset to start over\n",
                  static_cast<long long>(engine.max_context_len()));
      history.erase(history.end() - 1);
      continue;
    }
    auto req = engine.submit(ids, p, str("chat-", turn++), "");
    if (!req.is_ok()) {
      std::printf("error: %s\n", req.status().message().c_str());
      history.erase(history.end() - 1);
      continue;
    }
    std::string reply;
    while (true) {
      auto ev = (*req)->stream->pop(std::chrono::milliseconds(100));
      if (!ev) continue;
      std::fwrite(ev->text.data(), 1, ev->text.size(), stdout);
      std::fflush(stdout);
      reply += ev->text;
      if (ev->finish) {
        if (ev->finish->reason == "length") std::printf(" [max tokens]");
        break;
      }
    }
    std::printf("\n");
    history.push_back({{"role", "assistant"}, {"content", reply}});
  }
  engine.shutdown(0);
  return 0;
}

}  // namespace

void add_chat_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* s = app.add_subcommand("chat", "Interactive terminal chat (streams the answer)");
  s->add_option("--system", a->system, "System message");
  s->add_option("--max-tokens", a->max_tokens, "Most tokens per answer")->check(CLI::PositiveNumber);
  s->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber);
  s->add_option("--top-p", a->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0f, 1.0f));
  s->add_option("--top-k", a->top_k, "Top-k sampling (-1: off)");
  EngineFlagOptions flags;
  flags.seed_help = "Seed (answers become reproducible; also dummy weights)";
  add_engine_flags(s, a->engine, flags);
  const CLI::Option* seed = s->get_option("--seed");
  out.emplace_back(s, [a, seed] {
    a->seeded = seed->count() > 0;
    return run_chat(*a);
  });
}

}  // namespace rlm::cli
