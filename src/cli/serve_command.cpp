// `radixlm serve`: the OpenAI-compatible HTTP server.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/http_flags.h"
#include "server/engine_builder.h"
#include "server/http_server.h"
#include "server/kv_events.h"

namespace rlm::cli {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

struct ServeArgs {
  EngineArgs engine;
  std::vector<std::string> served_model_names;
  std::vector<std::string> allowed_origins;
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "none";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  int64_t shutdown_timeout_s = 30;
  std::string kv_events_endpoint, kv_events_replay_endpoint, kv_events_topic;
  HttpServerConfig http;

  ServeArgs() { engine.cpu_total_tokens = 32768; }  // the CPU pool when --max-total-tokens is not given
};

int run_serve(const ServeArgs& a) {
  if (Status st = a.engine.validate(); !st.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", st.message().c_str());
    return 2;
  }
  std::unique_ptr<KvEventPublisher> kv_events;  // outlives the engine and its scheduler thread
  if (!a.kv_events_endpoint.empty()) {
    auto started = KvEventPublisher::start({a.kv_events_endpoint, a.kv_events_replay_endpoint, a.kv_events_topic,
                                            static_cast<int32_t>(a.engine.page_size)});
    if (!started.is_ok()) {
      std::fprintf(stderr, "radixlm serve: %s\n", started.status().message().c_str());
      return 1;
    }
    kv_events = std::move(started).value();
    std::printf("radixlm: KV events on %s%s%s (topic '%s', blocks of %lld tokens)\n", a.kv_events_endpoint.c_str(),
                a.kv_events_replay_endpoint.empty() ? "" : ", replay on ", a.kv_events_replay_endpoint.c_str(),
                a.kv_events_topic.c_str(), static_cast<long long>(a.engine.page_size));
  }
  auto files = load_engine_files(a.engine, TokenizerUse::kRequired);
  if (!files.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", files.status().to_string().c_str());
    if (a.engine.model.empty()) std::fprintf(stderr, "radixlm serve: the default model is installed by scripts/setup.sh\n");
    return 1;
  }
  auto built = build_engine(a.engine, std::move(files).value(),
                             a.served_model_names.empty() ? std::string() : a.served_model_names[0]);
  if (!built.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", built.status().to_string().c_str());
    return 1;
  }
  ServingEngine& engine = **built;
  const int64_t kv_tokens = engine.runner().kv_pool().num_slots();
  const size_t graphs = engine.runner().cuda_graph_batch_sizes().size();
  if (const auto& plan = engine.runner().memory_plan()) std::printf("radixlm: memory: %s\n", plan->describe().c_str());
  std::printf("radixlm: limits: %s\n", engine.describe_limits().c_str());
  const std::string device = engine.runner().config().device.to_string();
  if (kv_events) engine.scheduler().set_cache_observer(kv_events.get());
  engine.start();

  HttpServerConfig hc = a.http;
  hc.host = a.host;
  hc.port = a.port;
  hc.api_key = a.api_key;
  if (a.served_model_names.size() > 1) hc.model_aliases.assign(a.served_model_names.begin() + 1, a.served_model_names.end());
  hc.allowed_origins = a.allowed_origins;
  hc.tool_call_parser = a.tool_call_parser;
  hc.reasoning_parser = a.reasoning_parser;
  HttpServer server(engine, hc);
  const int port = server.bind();
  if (port < 0) {
    std::fprintf(stderr, "radixlm serve: %s\n", server.bind_error().c_str());
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread http([&] { server.listen_after_bind(); });
  std::printf(
      "radixlm: serving '%s' on http://%s:%d (%s, %s, %s cache, page size %lld, %lld KV tokens, %zu CUDA graphs)\n",
      engine.model_name().c_str(), a.host.c_str(), port, device.c_str(),
      engine.has_chat_template() ? "chat template" : "no chat template", a.engine.cache.c_str(),
      static_cast<long long>(a.engine.page_size), static_cast<long long>(kv_tokens), graphs);
  std::fflush(stdout);
  while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::printf("radixlm: signal %d: draining in-flight requests (up to %llds)\n", g_signal.load(),
              static_cast<long long>(a.shutdown_timeout_s));
  std::fflush(stdout);
  engine.shutdown(a.shutdown_timeout_s * 1000);  // waits, then aborts what is left
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let streams write their last events
  server.stop();
  http.join();
  std::printf("radixlm: stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* s = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  EngineFlagOptions flags;
  flags.model_positional = true;
  add_engine_flags(s, a->engine, flags);
  s->add_option("--served-model-name", a->served_model_names,
                "Names the model answers to; the first is the id responses report (default: the model file's name)")
      ->expected(1, 64);
  s->add_option("--allowed-origins", a->allowed_origins,
                "CORS: origins allowed to call the API from a browser ('*': any); answers preflight OPTIONS requests")
      ->expected(1, 64);
  s->add_option("--tool-call-parser", a->tool_call_parser,
                "How chat tool calls are read from the output (auto: from the chat template's format)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none", "hermes", "llama3_json", "mistral", "qwen3_coder", "pythonic"}));
  s->add_option("--reasoning-parser", a->reasoning_parser,
                "Separate <think> reasoning into reasoning_content")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "qwen3", "deepseek-r1", "deepseek_r1"}));
  s->add_option("--host", a->host, "Address to bind");
  s->add_option("--port", a->port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  s->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY'");
  s->add_option("--shutdown-timeout", a->shutdown_timeout_s, "Seconds to drain on SIGINT/SIGTERM");
  s->add_option("--kv-events-endpoint", a->kv_events_endpoint,
                "Publish the prefix cache's KV events (vLLM's format, ZeroMQ PUB) on this endpoint, e.g. tcp://*:5557");
  s->add_option("--kv-events-replay-endpoint", a->kv_events_replay_endpoint,
                "ZeroMQ ROUTER endpoint answering replays of recent KV event batches, e.g. tcp://*:5558")
      ->needs("--kv-events-endpoint");
  s->add_option("--kv-events-topic", a->kv_events_topic, "Topic frame of every KV event message")
      ->needs("--kv-events-endpoint");
  add_http_flags(s, a->http);
  out.emplace_back(s, [a] { return run_serve(*a); });
}

}  // namespace rlm::cli
