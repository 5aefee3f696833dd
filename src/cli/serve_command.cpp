// `radixlm serve`: the OpenAI-compatible HTTP server.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "cli/runner_flags.h"
#include "engine/model_loader.h"
#include "engine/serving_limits.h"
#include "server/http_server.h"
#include "tokenizer/chat_template_loader.h"

namespace rlm::cli {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

struct ServeArgs {
  std::string model;
  std::string tokenizer;
  std::string chat_template;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string load_format = "auto";
  uint64_t seed = 0;
  std::string attention_backend;
  bool disable_overlap_schedule = false;
  int64_t max_mamba_cache_size = 0;  // hybrid models: recurrent-state slots (0: 3 x max running requests)
  std::string prefill_attention_backend;  // "": as attention_backend
  std::string decode_attention_backend;
  std::string device = "auto";
  int64_t page_size = 1;
  int64_t max_total_tokens = 0;  // 0: from --mem-fraction-static on CUDA, 32768 on the CPU
  // 0: chosen for the hardware (engine/serving_limits.h) and, for the running limit, the KV pool.
  int64_t max_running_requests = 0;
  int64_t context_length = 0;
  int64_t chunked_prefill_size = 0;
  int64_t max_prefill_tokens = 0;
  bool enable_mixed_chunk = true;
  std::string schedule_policy = "fcfs";
  std::string cache = "radix";
  int64_t max_queued_requests = 4096;
  int64_t shutdown_timeout_s = 30;
  int http_threads = 128;
  RunnerFlags runner;
};

int run_serve(const ServeArgs& a) {
  const std::string model_path = a.model.empty() ? default_model_path() : a.model;
  LoadOptions lo;
  lo.load_format = a.load_format;
  lo.dummy_seed = a.seed;
  auto loaded = load_model(model_path, lo);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", loaded.status().to_string().c_str());
    if (a.model.empty()) std::fprintf(stderr, "radixlm serve: the default model is installed by scripts/setup.sh\n");
    return 1;
  }
  auto tokenizer = load_tokenizer(a.tokenizer.empty() ? model_path : a.tokenizer);
  if (!tokenizer.is_ok()) {
    std::fprintf(stderr, "radixlm serve: tokenizer: %s\n", tokenizer.status().to_string().c_str());
    return 1;
  }
  auto tmpl = load_chat_template(a.tokenizer.empty() ? model_path : a.tokenizer, **tokenizer, a.chat_template);
  if (!tmpl.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", tmpl.status().to_string().c_str());
    return 1;
  }
  const int64_t context = a.context_length > 0 ? a.context_length : loaded->config.max_position_embeddings;
  auto device = resolve_device(a.device);
  if (!device.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", device.status().message().c_str());
    return 2;
  }
  ServingLimits given;
  given.max_running_requests = a.max_running_requests;
  given.chunked_prefill_size = a.chunked_prefill_size;
  given.max_prefill_tokens = a.max_prefill_tokens;
  given.cuda_graph_max_bs = a.runner.cuda_graph_max_bs;
  const ServingLimits limits = default_serving_limits(hardware_info(*device), given);
  ModelRunnerConfig rc;
  rc.device = *device;
  rc.attention_backend = a.attention_backend.empty() ? default_attention_backend(*device) : a.attention_backend;
  rc.prefill_attention_backend = a.prefill_attention_backend;
  rc.decode_attention_backend = a.decode_attention_backend;
  rc.page_size = a.page_size;
  rc.max_requests = limits.max_running_requests;  // the cap until the KV pool is sized
  rc.max_num_tokens = limits.max_prefill_tokens;  // the largest step the profile plans for
  rc.max_context_len = context;
  rc.mamba_slots = a.max_mamba_cache_size;
  const int64_t total_tokens = a.max_total_tokens > 0 ? a.max_total_tokens : (device->is_cuda() ? 0 : 32768);
  rc.num_pages = total_tokens > 0 ? std::max<int64_t>(1, total_tokens / a.page_size) : 0;
  a.runner.apply(rc, /*size_from_memory=*/total_tokens == 0);
  rc.cuda_graph_max_bs = limits.cuda_graph_max_bs;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  if (!runner.is_ok()) {
    std::fprintf(stderr, "radixlm serve: %s\n", runner.status().to_string().c_str());
    return 1;
  }
  const int64_t kv_tokens = (*runner)->kv_pool().num_slots();
  const std::vector<int64_t> graph_sizes = (*runner)->cuda_graph_batch_sizes();
  SchedulerConfig sc;
  sc.max_running_requests = a.max_running_requests > 0
                                ? a.max_running_requests
                                : running_requests_for_kv(kv_tokens, limits.max_running_requests);
  sc.chunked_prefill_size = limits.chunked_prefill_size;
  sc.max_prefill_tokens = limits.max_prefill_tokens;
  sc.enable_mixed_chunk = a.enable_mixed_chunk;
  sc.overlap_schedule = !a.disable_overlap_schedule;
  sc.policy = parse_schedule_policy(a.schedule_policy).value();  // CLI11 checked the names
  sc.cache = parse_cache_kind(a.cache).value();
  sc.max_context_len = context;
  sc.max_queued_requests = a.max_queued_requests;
  std::string name = a.served_model_name;
  if (name.empty()) name = std::filesystem::path(model_path).filename().string();
  ServingEngine engine(name, std::move(runner).value(), std::move(tokenizer).value(), std::move(tmpl).value(), sc);
  engine.start();

  HttpServerConfig hc;
  hc.host = a.host;
  hc.port = a.port;
  hc.api_key = a.api_key;
  hc.num_threads = a.http_threads;
  HttpServer server(engine, hc);
  const int port = server.bind();
  if (port < 0) {
    std::fprintf(stderr, "radixlm serve: cannot listen on %s:%d\n", a.host.c_str(), a.port);
    return 1;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::thread http([&] { server.listen_after_bind(); });
  if (const auto& plan = engine.runner().memory_plan()) std::printf("radixlm: memory: %s\n", plan->describe().c_str());
  std::printf("radixlm: limits: %s\n", engine.describe_limits().c_str());
  std::printf(
      "radixlm: serving '%s' on http://%s:%d (%s, %s, %s cache, page size %lld, %lld KV tokens, %zu CUDA graphs)\n",
      name.c_str(), a.host.c_str(), port, device->to_string().c_str(),
      engine.has_chat_template() ? "chat template" : "no chat template", a.cache.c_str(),
      static_cast<long long>(a.page_size), static_cast<long long>(kv_tokens), graph_sizes.size());
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
  s->add_option("--model,model", a->model, "Model directory or .gguf file (default: the embedded SmolLM2)");
  s->add_option("--tokenizer", a->tokenizer, "Tokenizer path when it differs from the model");
  s->add_option("--chat-template", a->chat_template, "A Jinja chat template file overriding the model's");
  s->add_option("--served-model-name", a->served_model_name, "Model id reported by /v1/models");
  s->add_option("--host", a->host, "Address to bind");
  s->add_option("--port", a->port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  s->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY'");
  s->add_option("--load-format", a->load_format, "auto | safetensors | gguf | dummy");
  s->add_option("--seed", a->seed, "Seed for dummy weights");
  s->add_option("--device", a->device, "auto | cpu | cuda | cuda:N (auto: CUDA when a GPU is visible)");
  s->add_option("--attention-backend", a->attention_backend, "Attention backend (default: native on CUDA, cpu)");
  s->add_option("--prefill-attention-backend", a->prefill_attention_backend,
                 "Backend for prefill/extend steps (default: --attention-backend)");
  s->add_option("--decode-attention-backend", a->decode_attention_backend,
                 "Backend for decode steps (default: --attention-backend); two different names make 'hybrid'");
  s->add_flag("--disable-overlap-schedule", a->disable_overlap_schedule,
              "Run each decode step to completion before scheduling the next (no CPU/GPU overlap)");
  s->add_option("--max-mamba-cache-size", a->max_mamba_cache_size,
                "Hybrid linear-attention models: recurrent-state slots (working, tracking and cached snapshots; "
                "0: 3 x --max-running-requests)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--page-size", a->page_size, "KV page size in tokens")->check(CLI::PositiveNumber);
  s->add_option("--max-total-tokens", a->max_total_tokens,
                 "KV cache capacity in tokens (default: from --mem-fraction-static on CUDA, 32768 on the CPU)")
      ->check(CLI::PositiveNumber);
  s->add_option("--max-running-requests", a->max_running_requests,
                "Most requests decoding at once (default: by GPU memory, 512 on an 80 GB GPU, 64 on the CPU; "
                "lowered to KV tokens / 256)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--context-length", a->context_length, "Context length (default: the model's)");
  s->add_option("--chunked-prefill-size", a->chunked_prefill_size,
                "Most prompt tokens of one request per step (default: by GPU memory, 8192 on an 80 GB GPU, "
                "2048 on the CPU)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--max-prefill-tokens", a->max_prefill_tokens,
                "Most new tokens in a step with prompt chunks, decode tokens of a mixed step included (default: "
                "by GPU memory, 8192 on an 80 GB GPU and on the CPU)")
      ->check(CLI::NonNegativeNumber);
  s->add_flag("--enable-mixed-chunk,!--disable-mixed-chunk", a->enable_mixed_chunk,
              "Mixed steps: decode tokens of the running requests and prompt chunks in one step (default on; "
              "--disable-mixed-chunk runs prompt chunks in steps of their own)");
  s->add_option("--schedule-policy", a->schedule_policy, "fcfs | lpm")->check(CLI::IsMember({"fcfs", "lpm"}));
  s->add_option("--cache", a->cache, "radix | naive")->check(CLI::IsMember({"radix", "naive"}));
  s->add_option("--max-queued-requests", a->max_queued_requests, "Queue limit (503 beyond)")
      ->check(CLI::PositiveNumber);
  s->add_option("--shutdown-timeout", a->shutdown_timeout_s, "Seconds to drain on SIGINT/SIGTERM");
  s->add_option("--http-threads", a->http_threads, "HTTP worker threads")->check(CLI::PositiveNumber);
  a->runner.add_to(s);
  out.emplace_back(s, [a] { return run_serve(*a); });
}

}  // namespace rlm::cli
