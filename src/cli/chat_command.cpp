// `radixlm chat`: an interactive terminal chat with history, rendered with the model's chat
// template and streamed token by token. /reset clears the history, /exit (or EOF) quits.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "engine/model_loader.h"
#include "server/serving_engine.h"
#include "tokenizer/chat_template_loader.h"

namespace rlm::cli {

namespace {

struct ChatArgs {
  std::string model;
  std::string system;
  int64_t max_tokens = 512;
  float temperature = 0.7f;
  float top_p = 0.9f;
  int32_t top_k = -1;
  uint64_t seed = 0;
  bool seeded = false;
  int64_t context_length = 0;
  std::string device = "auto";
};

int run_chat(const ChatArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  auto loaded = load_model(path);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "radixlm chat: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  auto tok = load_tokenizer(path);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "radixlm chat: tokenizer: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto tmpl = load_chat_template(path, **tok);
  if (!tmpl.is_ok() || !tmpl->has_value()) {
    std::fprintf(stderr, "radixlm chat: %s\n",
                 tmpl.is_ok() ? "this model has no chat template" : tmpl.status().to_string().c_str());
    return 1;
  }
  const int64_t context = a.context_length > 0 ? a.context_length : loaded->config.max_position_embeddings;
  auto device = resolve_device(a.device);
  if (!device.is_ok()) {
    std::fprintf(stderr, "radixlm chat: %s\n", device.status().message().c_str());
    return 2;
  }
  ModelRunnerConfig rc;
  rc.device = *device;
  rc.attention_backend = default_attention_backend(*device);
  rc.page_size = 16;
  rc.max_requests = 2;
  rc.max_context_len = context;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  if (!runner.is_ok()) {
    std::fprintf(stderr, "radixlm chat: %s\n", runner.status().to_string().c_str());
    return 1;
  }
  SchedulerConfig sc;
  sc.max_context_len = context;
  sc.check_integrity_when_idle = false;
  ServingEngine engine(std::filesystem::path(path).filename().string(), std::move(runner).value(),
                       std::move(tok).value(), std::move(tmpl).value(), sc);
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
    if (a.seeded) p.seed = a.seed + static_cast<uint64_t>(turn);
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
  s->add_option("--model", a->model, "Model directory or .gguf file (default: the embedded SmolLM2)");
  s->add_option("--system", a->system, "System message");
  s->add_option("--max-tokens", a->max_tokens, "Most tokens per answer")->check(CLI::PositiveNumber);
  s->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")->check(CLI::NonNegativeNumber);
  s->add_option("--top-p", a->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0f, 1.0f));
  s->add_option("--top-k", a->top_k, "Top-k sampling (-1: off)");
  auto* seed = s->add_option("--seed", a->seed, "Seed (answers become reproducible)");
  s->add_option("--context-length", a->context_length, "Context length (default: the model's)");
  s->add_option("--device", a->device, "auto | cpu | cuda | cuda:N");
  out.emplace_back(s, [a, seed] {
    a->seeded = seed->count() > 0;
    return run_chat(*a);
  });
}

}  // namespace rlm::cli
