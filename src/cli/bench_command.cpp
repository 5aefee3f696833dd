// `radixlm bench <mode>`: benchmark tools. `bench serve` is the load generator for a running
// OpenAI-compatible / SGLang server (metric definitions in bench/metrics.h); other modes
// (one-batch, offline) are added beside it in add_bench_command.
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench/bench_runner.h"
#include "bench/dataset.h"
#include "bench/report.h"
#include "bench/schedule.h"
#include "cli/commands.h"
#include "core/json.h"

namespace rlm::cli {

namespace {

struct BenchServeArgs {
  std::string backend = "openai";
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string model;
  std::string api_key;
  std::string dataset_name = "random";
  std::string prompt_format = "auto";
  bool tokenize_prompts = false;
  bench::DatasetOptions data;
  double request_rate = INFINITY;
  double burstiness = 1.0;
  int64_t max_concurrency = 0;
  int64_t warmup_requests = 1;
  std::string output_file;
  bool disable_ignore_eos = false;
  double temperature = 0.0;
  std::string extra_request_body;
  double request_timeout = 6 * 3600.0;
  bool progress = false;
};

nlohmann::json args_json(const BenchServeArgs& a, const bench::RunOptions& run,
                         const bench::DatasetOptions& data) {
  nlohmann::json j;
  j["backend"] = a.backend;
  j["host"] = run.endpoint.host;
  j["port"] = run.endpoint.port;
  j["path_prefix"] = run.endpoint.path_prefix;
  j["model"] = run.request.model;
  j["dataset_name"] = a.dataset_name;
  j["prompt_format"] = data.format == bench::PromptFormat::kTokenIds ? "ids" : "text";
  j["num_prompts"] = data.num_prompts;
  j["random_input_len"] = data.random_input_len;
  j["random_output_len"] = data.random_output_len;
  j["random_range_ratio"] = data.random_range_ratio;
  j["gsp_num_groups"] = data.gsp_num_groups;
  j["gsp_prompts_per_group"] = data.gsp_prompts_per_group;
  j["gsp_system_prompt_len"] = data.gsp_system_prompt_len;
  j["gsp_question_len"] = data.gsp_question_len;
  j["gsp_output_len"] = data.gsp_output_len;
  j["multi_turn_num_turns"] = data.multi_turn_num_turns;
  j["token_id_low"] = data.token_id_low;
  j["token_id_high"] = data.token_id_high;
  j["request_rate"] = std::isinf(a.request_rate) ? nlohmann::json("inf") : nlohmann::json(a.request_rate);
  j["burstiness"] = a.burstiness;
  j["max_concurrency"] = a.max_concurrency > 0 ? nlohmann::json(a.max_concurrency) : nlohmann::json();
  j["warmup_requests"] = a.warmup_requests;
  j["seed"] = data.seed;
  j["ignore_eos"] = run.request.ignore_eos;
  j["temperature"] = run.request.temperature;
  j["extra_request_body"] = run.request.extra_body;
  return j;
}

StatusOr<bench::PromptFormat> resolve_format(const BenchServeArgs& a, bench::Backend backend,
                                             bench::DatasetKind kind) {
  std::string f = a.tokenize_prompts ? "ids" : a.prompt_format;
  if (f == "auto") {
    f = backend == bench::Backend::kOpenAiChat || kind == bench::DatasetKind::kMultiTurn ? "text" : "ids";
  }
  if (f == "text") return bench::PromptFormat::kText;
  if (f != "ids") {
    return invalid_argument(str("unknown --prompt-format '", a.prompt_format, "' (expected auto, ids or text)"));
  }
  if (backend == bench::Backend::kOpenAiChat) {
    return invalid_argument("--backend openai-chat sends text messages; token-id prompts are not possible");
  }
  return bench::PromptFormat::kTokenIds;
}

int fail_with(const Status& s) {
  std::fprintf(stderr, "radixlm bench serve: %s\n", s.message().c_str());
  return s.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

int run_bench_serve(BenchServeArgs a) {
  auto backend = bench::parse_backend(a.backend);
  if (!backend.is_ok()) return fail_with(backend.status());
  auto kind = bench::parse_dataset_kind(a.dataset_name);
  if (!kind.is_ok()) return fail_with(kind.status());
  auto format = resolve_format(a, *backend, *kind);
  if (!format.is_ok()) return fail_with(format.status());

  bench::RunOptions run;
  if (!a.base_url.empty()) {
    auto ep = bench::parse_base_url(a.base_url);
    if (!ep.is_ok()) return fail_with(ep.status());
    run.endpoint = *ep;
  } else {
    run.endpoint.host = a.host;
    run.endpoint.port = a.port;
  }
  run.endpoint.api_key = a.api_key;
  if (run.endpoint.api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) run.endpoint.api_key = env;
  }
  run.endpoint.timeout_s = a.request_timeout;
  run.request.backend = *backend;
  run.request.ignore_eos = !a.disable_ignore_eos;
  run.request.temperature = a.temperature;
  if (!a.extra_request_body.empty()) {
    StatusOr<nlohmann::json> extra = parse_json(a.extra_request_body, kRequestJsonLimits);
    if (extra.is_ok()) run.request.extra_body = std::move(extra).value();
    if (!extra.is_ok() || !run.request.extra_body.is_object()) {
      return fail_with(invalid_argument(
          str("--extra-request-body must be a JSON object, got '", a.extra_request_body, "'")));
    }
  }
  run.request_rate = a.request_rate;
  run.burstiness = a.burstiness;
  run.max_concurrency = a.max_concurrency;
  run.warmup_requests = a.warmup_requests;
  run.seed = a.data.seed;
  run.progress = a.progress;

  if (a.max_concurrency < 0) {
    return fail_with(invalid_argument(str("--max-concurrency must be >= 1, got ", a.max_concurrency)));
  }
  if (auto schedule = bench::arrival_times(1, a.request_rate, a.burstiness, 0); !schedule.is_ok()) {
    return fail_with(schedule.status());
  }

  bench::DatasetOptions data = a.data;
  data.kind = *kind;
  data.format = *format;
  auto dataset = bench::build_dataset(data);
  if (!dataset.is_ok()) return fail_with(dataset.status());

  run.request.model = a.model;
  if (run.request.model.empty()) {
    auto model = bench::fetch_first_model_id(run.endpoint);
    if (model.is_ok()) {
      run.request.model = *model;
    } else if (*backend != bench::Backend::kSglang) {
      return fail_with(Status(model.status().code(),
                              "no --model given and it could not be read from the server: " +
                                  model.status().message()));
    }
  }

  std::fprintf(stderr, "bench: %zu conversations (%s, %s prompts) -> http://%s:%d%s%s, model '%s'\n",
               dataset->size(), bench::dataset_kind_name(*kind),
               *format == bench::PromptFormat::kTokenIds ? "token-id" : "text", run.endpoint.host.c_str(),
               run.endpoint.port, run.endpoint.path_prefix.c_str(), bench::backend_path(*backend),
               run.request.model.c_str());
  auto result = bench::run_benchmark(*dataset, run);
  if (!result.is_ok()) return fail_with(result.status());

  bench::BenchMetrics metrics = bench::compute_metrics(result->outcomes, result->duration_s);
  bench::ReportHeader header{bench::backend_name(*backend), run.request.model, a.dataset_name,
                             a.request_rate, a.max_concurrency};
  bench::print_report(stdout, header, metrics);
  if (!a.output_file.empty()) {
    std::ofstream out(a.output_file);
    if (!out) return fail_with(not_found(str("cannot write --output-file '", a.output_file, "'")));
    out << bench::result_json(metrics, args_json(a, run, data), result->outcomes).dump(2) << "\n";
  }
  return metrics.completed > 0 && metrics.failed == 0 ? 0 : 1;  // a run with failed requests is not a result
}

}  // namespace

void add_bench_serve_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* s = bench.add_subcommand("serve", "Load-test a running OpenAI-compatible or SGLang server");
  s->add_option("--backend", a->backend, "openai (/v1/completions) | openai-chat (/v1/chat/completions) | sglang (/generate)")->capture_default_str();
  s->add_option("--base-url", a->base_url, "Server URL http://host:port[/prefix] (overrides --host/--port)");
  s->add_option("--host", a->host, "Server host")->capture_default_str();
  s->add_option("--port", a->port, "Server port")->capture_default_str()->check(CLI::Range(1, 65535));
  s->add_option("--model", a->model, "Model name sent in requests (default: first id of GET /v1/models)");
  s->add_option("--api-key", a->api_key, "Bearer token for the Authorization header (default: $OPENAI_API_KEY)");
  s->add_option("--dataset-name", a->dataset_name, "random | generated-shared-prefix | multi-turn")->capture_default_str();
  s->add_option("--prompt-format", a->prompt_format, "auto | ids | text (auto: ids, text for openai-chat and multi-turn)")->capture_default_str();
  s->add_flag("--tokenize-prompts", a->tokenize_prompts, "Send token-id prompts (same as --prompt-format ids)");
  s->add_option("--num-prompts", a->data.num_prompts, "Prompts (multi-turn: conversations)")->capture_default_str();
  s->add_option("--random-input-len", a->data.random_input_len, "Random dataset: input tokens")->capture_default_str();
  s->add_option("--random-output-len", a->data.random_output_len, "Random dataset: output tokens")->capture_default_str();
  s->add_option("--random-range-ratio", a->data.random_range_ratio, "Lengths uniform in [len*ratio, len]")->capture_default_str();
  s->add_option("--gsp-num-groups", a->data.gsp_num_groups, "Shared-prefix groups")->capture_default_str();
  s->add_option("--gsp-prompts-per-group", a->data.gsp_prompts_per_group, "Prompts per group")->capture_default_str();
  s->add_option("--gsp-system-prompt-len", a->data.gsp_system_prompt_len, "Shared system prompt tokens")->capture_default_str();
  s->add_option("--gsp-question-len", a->data.gsp_question_len, "Question tokens")->capture_default_str();
  s->add_option("--gsp-output-len", a->data.gsp_output_len, "Output tokens")->capture_default_str();
  s->add_option("--multi-turn-num-turns", a->data.multi_turn_num_turns, "Turns per conversation")->capture_default_str();
  s->add_option("--token-id-low", a->data.token_id_low, "Random token ids from [low, high)")->capture_default_str();
  s->add_option("--token-id-high", a->data.token_id_high, "Random token ids from [low, high)")->capture_default_str();
  s->add_option("--request-rate", a->request_rate, "Requests per second, Poisson arrivals (inf: all at once)")->capture_default_str();
  s->add_option("--burstiness", a->burstiness, "Gamma shape of the inter-arrival times (1: Poisson)")->capture_default_str();
  s->add_option("--max-concurrency", a->max_concurrency, "Most requests in flight (default: unbounded)");
  s->add_option("--seed", a->data.seed, "Seed for prompts and arrival times")->capture_default_str();
  s->add_option("--warmup-requests", a->warmup_requests, "Requests sent first and excluded from metrics")->capture_default_str();
  s->add_option("--output-file", a->output_file, "Write the JSON result (metrics, args, per-request details)");
  s->add_flag("--disable-ignore-eos", a->disable_ignore_eos, "Let requests stop at EOS (default: ignore_eos=true)");
  s->add_option("--temperature", a->temperature, "Sampling temperature sent with requests")->capture_default_str();
  s->add_option("--extra-request-body", a->extra_request_body, "JSON object merged into each request body");
  s->add_option("--request-timeout", a->request_timeout, "Seconds of silence before a request fails")->capture_default_str();
  s->add_flag("--progress", a->progress, "Print progress on stderr");
  out.emplace_back(s, [a] { return run_bench_serve(*a); });
}

void add_bench_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& out) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: serve (load generator)");
  bench->require_subcommand(1);
  add_bench_serve_command(*bench, out);
  add_bench_one_batch_command(*bench, out);
  add_bench_offline_command(*bench, out);
}

}  // namespace rlm::cli
