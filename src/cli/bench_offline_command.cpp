// `radixlm bench offline`: in-process throughput (no HTTP) — every request of a dataset of random
// token prompts is submitted to the scheduler at once and the engine runs until all finish; the
// report gives request, input, output and total token throughput (SGLang's bench_offline_throughput
// definitions). `--dataset-out` writes the prompts and output lengths as JSON so that another
// engine (tools/hf_offline_bench.py: transformers.generate) can run exactly the same work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "cli/runner_flags.h"
#include "core/json.h"
#include "engine/model_loader.h"
#include "engine/model_runner.h"
#include "scheduler/scheduler.h"

namespace rlm::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct OfflineArgs {
  std::string model;
  std::string load_format = "dummy";
  std::string device = "auto";
  std::string attention_backend;
  bool disable_overlap_schedule = false;
  std::string prefill_attention_backend;  // "": as attention_backend
  std::string decode_attention_backend;
  int64_t num_prompts = 64;
  int64_t input_len = 512;
  int64_t output_len = 128;
  double range_ratio = 1.0;  // lengths uniform in [len * ratio, len]
  int64_t page_size = 16;
  int64_t max_running_requests = 64;
  int64_t max_total_tokens = 0;  // KV capacity; 0: enough for max_running_requests full requests
  int64_t chunked_prefill_size = 8192;
  int64_t max_prefill_tokens = 16384;
  std::string dataset;      // read prompts from this JSON instead of generating them
  std::string dataset_out;  // write the generated prompts here
  std::string result_out;   // write the result JSON here
  uint64_t seed = 0;
  RunnerFlags runner;
};

struct Dataset {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> output_lens;
};

// Discards text: the offline benchmark counts tokens only.
class NullDecoder : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return {}; }
  std::string flush() override { return {}; }
};

Dataset make_dataset(const OfflineArgs& a, int64_t vocab) {
  std::mt19937_64 rng(a.seed);
  auto len = [&](int64_t max_len) {
    const int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(max_len) * a.range_ratio));
    return std::uniform_int_distribution<int64_t>(lo, std::max(lo, max_len))(rng);
  };
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
  Dataset d;
  for (int64_t i = 0; i < a.num_prompts; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(len(a.input_len)));
    for (int32_t& t : p) t = tok(rng);
    d.prompts.push_back(std::move(p));
    d.output_lens.push_back(len(a.output_len));
  }
  return d;
}

StatusOr<Dataset> read_dataset(const std::string& path, int64_t vocab) {
  StatusOr<nlohmann::json> parsed = read_json_file(path);
  if (!parsed.is_ok() && parsed.status().code() == StatusCode::kNotFound) return not_found(str("cannot open dataset ", path));
  nlohmann::json j = parsed.is_ok() ? std::move(parsed).value() : nlohmann::json();
  if (!j.is_object() || !j.contains("prompts") || !j.contains("output_lens")) {
    return invalid_argument(str(path, ": expected a JSON object with 'prompts' and 'output_lens'"));
  }
  Dataset d;
  try {
    d.prompts = j["prompts"].get<std::vector<std::vector<int32_t>>>();
    d.output_lens = j["output_lens"].get<std::vector<int64_t>>();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(str(path, ": ", e.what()));
  }
  if (d.prompts.size() != d.output_lens.size() || d.prompts.empty()) {
    return invalid_argument(str(path, ": ", d.prompts.size(), " prompts but ", d.output_lens.size(), " output lengths"));
  }
  for (size_t i = 0; i < d.prompts.size(); ++i) {
    if (d.prompts[i].empty() || d.output_lens[i] < 1) return invalid_argument(str(path, ": request ", i, " is empty"));
    for (int32_t t : d.prompts[i]) {
      if (t < 0 || t >= vocab) return invalid_argument(str(path, ": request ", i, " has token ", t, " outside the vocabulary"));
    }
  }
  return d;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "radixlm bench offline: %s\n", msg.c_str());
  return 1;
}

int run_offline(const OfflineArgs& a) {
  auto device = resolve_device(a.device);
  if (!device.is_ok()) return fail(device.status().message()) + 1;
  LoadOptions lo;
  lo.load_format = a.load_format;
  lo.dummy_seed = a.seed;
  a.runner.apply_load(lo);
  auto loaded = load_model(a.model.empty() ? default_model_path() : a.model, lo);
  if (!loaded.is_ok()) return fail(loaded.status().to_string());
  const ModelConfig cfg = loaded->config;

  Dataset data;
  if (!a.dataset.empty()) {
    auto d = read_dataset(a.dataset, cfg.vocab_size);
    if (!d.is_ok()) return fail(d.status().to_string());
    data = std::move(d).value();
  } else {
    data = make_dataset(a, cfg.vocab_size);
  }
  int64_t longest = 0, input_tokens = 0, output_tokens = 0;
  for (size_t i = 0; i < data.prompts.size(); ++i) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(data.prompts[i].size()) + data.output_lens[i]);
    input_tokens += static_cast<int64_t>(data.prompts[i].size());
    output_tokens += data.output_lens[i];
  }
  if (!a.dataset_out.empty()) {
    std::ofstream f(a.dataset_out);
    f << nlohmann::json{{"prompts", data.prompts}, {"output_lens", data.output_lens}}.dump();
    if (!f) return fail("cannot write " + a.dataset_out);
  }

  ModelRunnerConfig rc;
  rc.device = *device;
  rc.attention_backend = a.attention_backend.empty() ? default_attention_backend(*device) : a.attention_backend;
  rc.prefill_attention_backend = a.prefill_attention_backend;
  rc.decode_attention_backend = a.decode_attention_backend;
  rc.page_size = a.page_size;
  rc.max_requests = a.max_running_requests;
  rc.max_context_len = longest;
  const int64_t kv_tokens = a.max_total_tokens > 0 ? a.max_total_tokens : a.max_running_requests * longest;
  rc.num_pages = (kv_tokens + a.page_size - 1) / a.page_size;
  a.runner.apply(rc, /*size_from_memory=*/false);  // the pool is sized by --max-total-tokens here
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  if (!runner.is_ok()) return fail(runner.status().to_string());
  ModelStepExecutor exec(**runner);
  SchedulerConfig sc;
  sc.max_running_requests = a.max_running_requests;
  sc.chunked_prefill_size = a.chunked_prefill_size;
  sc.max_prefill_tokens = a.max_prefill_tokens;
  sc.overlap_schedule = !a.disable_overlap_schedule;
  sc.max_context_len = longest;
  sc.max_queued_requests = static_cast<int64_t>(data.prompts.size()) + 8;
  sc.check_integrity_when_idle = false;
  Scheduler sched(exec, sc, [](bool, const std::vector<int32_t>&) { return std::make_unique<NullDecoder>(); });

  // Runs `prompts` to completion on this thread; returns the seconds it took.
  auto run_all = [&](const std::string& tag, size_t count) -> StatusOr<double> {
    std::vector<std::shared_ptr<Req>> reqs;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      auto r = std::make_shared<Req>();
      r->rid = tag + std::to_string(i);
      r->prompt_ids = data.prompts[i];
      r->params.temperature = 0.0f;
      r->params.max_new_tokens = data.output_lens[i];
      r->params.min_new_tokens = data.output_lens[i];
      r->params.ignore_eos = true;
      r->stream = std::make_shared<RequestStream>();
      RLM_RETURN_IF_ERROR(sched.submit(r));
      reqs.push_back(std::move(r));
    }
    while (sched.step()) {
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const auto& r : reqs) {
      if (r->state != ReqState::kFinished) return internal_error(str("request ", r->rid, " did not finish"));
      if (static_cast<int64_t>(r->output_ids.size()) != r->params.max_new_tokens) {
        return internal_error(str("request ", r->rid, " produced ", r->output_ids.size(), " tokens, wanted ",
                                  r->params.max_new_tokens));
      }
    }
    return secs;
  };
  // Warm-up (first-touch allocations, cuBLAS heuristics), then the measured run.
  auto warm = run_all("warmup-", std::min<size_t>(data.prompts.size(), 4));
  if (!warm.is_ok()) return fail(warm.status().to_string());
  sched.flush_cache();
  auto secs = run_all("req-", data.prompts.size());
  if (!secs.is_ok()) return fail(secs.status().to_string());
  const double s = *secs;
  const double n = static_cast<double>(data.prompts.size());
  nlohmann::json result = {
      {"backend", "radixlm"},
      {"model", cfg.architecture},
      {"device", device->to_string()},
      {"num_requests", data.prompts.size()},
      {"total_input_tokens", input_tokens},
      {"total_output_tokens", output_tokens},
      {"duration_s", s},
      {"request_throughput", n / s},
      {"input_throughput", static_cast<double>(input_tokens) / s},
      {"output_throughput", static_cast<double>(output_tokens) / s},
      {"total_throughput", static_cast<double>(input_tokens + output_tokens) / s},
  };
  std::printf("model %s on %s: %zu requests, %lld input + %lld output tokens in %.3f s\n", cfg.architecture.c_str(),
              device->to_string().c_str(), data.prompts.size(), static_cast<long long>(input_tokens),
              static_cast<long long>(output_tokens), s);
  std::printf("request throughput %.2f req/s, output %.1f tok/s, total %.1f tok/s\n", n / s,
              static_cast<double>(output_tokens) / s, static_cast<double>(input_tokens + output_tokens) / s);
  if (!a.result_out.empty()) {
    std::ofstream f(a.result_out);
    f << result.dump(1) << "\n";
    if (!f) return fail("cannot write " + a.result_out);
  }
  return 0;
}

}  // namespace

void add_bench_offline_command(CLI::App& bench, std::vector<std::pair<CLI::App*, Runner>>& out) {
  auto a = std::make_shared<OfflineArgs>();
  CLI::App* s = bench.add_subcommand("offline", "In-process throughput on random prompts (no HTTP)");
  s->add_option("--model", a->model, "Model directory or .gguf (configs/qwen3-0.6b with --load-format dummy)");
  s->add_option("--load-format", a->load_format, "dummy (default) | auto | safetensors | gguf");
  s->add_option("--device", a->device, "auto | cpu | cuda | cuda:N");
  s->add_option("--attention-backend", a->attention_backend, "Attention backend (default: native on CUDA, cpu)");
  s->add_option("--prefill-attention-backend", a->prefill_attention_backend,
                 "Backend for prefill/extend steps (default: --attention-backend)");
  s->add_option("--decode-attention-backend", a->decode_attention_backend,
                 "Backend for decode steps (default: --attention-backend); two different names make 'hybrid'");
  s->add_flag("--disable-overlap-schedule", a->disable_overlap_schedule,
              "Run each decode step to completion before scheduling the next (no CPU/GPU overlap)");
  s->add_option("--num-prompts", a->num_prompts, "Requests")->check(CLI::PositiveNumber);
  s->add_option("--input-len", a->input_len, "Longest prompt")->check(CLI::PositiveNumber);
  s->add_option("--output-len", a->output_len, "Longest output")->check(CLI::PositiveNumber);
  s->add_option("--random-range-ratio", a->range_ratio, "Lengths are uniform in [len * ratio, len]")
      ->check(CLI::Range(0.0, 1.0));
  s->add_option("--page-size", a->page_size, "KV page size")->check(CLI::PositiveNumber);
  s->add_option("--max-running-requests", a->max_running_requests, "Decode batch limit")->check(CLI::PositiveNumber);
  s->add_option("--max-total-tokens", a->max_total_tokens, "KV capacity in tokens (0: all running requests fit)")
      ->check(CLI::NonNegativeNumber);
  s->add_option("--chunked-prefill-size", a->chunked_prefill_size, "Prompt tokens per request per step")
      ->check(CLI::PositiveNumber);
  s->add_option("--max-prefill-tokens", a->max_prefill_tokens, "Prompt tokens per prefill step")
      ->check(CLI::PositiveNumber);
  s->add_option("--dataset", a->dataset, "Read prompts and output lengths from this JSON");
  s->add_option("--dataset-out", a->dataset_out, "Write the prompts and output lengths as JSON");
  s->add_option("--result-out", a->result_out, "Write the result as JSON");
  s->add_option("--seed", a->seed, "Seed for dummy weights and prompts");
  a->runner.add_to(s);
  out.emplace_back(s, [a] { return run_offline(*a); });
}

}  // namespace rlm::cli
