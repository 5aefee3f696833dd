#include "bench/offline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/json.h"
#include "server/engine_builder.h"
#include "server/offline_engine.h"

namespace rlm::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct Dataset {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> output_lens;
};

Dataset make_dataset(const OfflineArgs& a, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
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

// Runs every request of `data` (the first `count`) to completion; returns the seconds it took.
StatusOr<double> run_all(OfflineEngine& engine, const Dataset& data, size_t count) {
  std::vector<OfflineRequest> requests(count);
  for (size_t i = 0; i < count; ++i) {
    OfflineRequest& r = requests[i];
    r.prompt_ids = data.prompts[i];
    r.params.temperature = 0.0f;
    r.params.max_new_tokens = data.output_lens[i];
    r.params.min_new_tokens = data.output_lens[i];
    r.params.ignore_eos = true;
  }
  const auto t0 = Clock::now();
  RLM_ASSIGN_OR_RETURN(std::vector<OfflineOutput> outputs, engine.generate(requests));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  for (size_t i = 0; i < count; ++i) {
    if (static_cast<int64_t>(outputs[i].output_ids.size()) != data.output_lens[i]) {
      return internal_error(str("request ", i, " produced ", outputs[i].output_ids.size(), " tokens (",
                                outputs[i].finish.reason, "), wanted ", data.output_lens[i]));
    }
  }
  return secs;
}

}  // namespace

int run_offline(const EngineArgs& engine, const OfflineArgs& a) {
  if (Status st = engine.validate(); !st.is_ok()) return fail(st.message()) + 1;
  auto files = load_engine_files(engine, TokenizerUse::kNone);
  if (!files.is_ok()) return fail(files.status().to_string());
  const ModelConfig cfg = files->model.config;

  Dataset data;
  if (!a.dataset.empty()) {
    auto d = read_dataset(a.dataset, cfg.vocab_size);
    if (!d.is_ok()) return fail(d.status().to_string());
    data = std::move(d).value();
  } else {
    data = make_dataset(a, engine.seed, cfg.vocab_size);
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

  EngineArgs e = engine;
  if (e.context_length == 0) e.context_length = longest;
  auto built = build_engine(e, std::move(files).value());
  if (!built.is_ok()) return fail(built.status().to_string());
  const std::string device = (*built)->runner().config().device.to_string();
  OfflineEngine offline(**built);
  // Warm-up (first-touch allocations, cuBLAS heuristics), then the measured run.
  auto warm = run_all(offline, data, std::min<size_t>(data.prompts.size(), 4));
  if (!warm.is_ok()) return fail(warm.status().to_string());
  offline.flush_cache();
  auto secs = run_all(offline, data, data.prompts.size());
  if (!secs.is_ok()) return fail(secs.status().to_string());
  const double s = *secs;
  const double n = static_cast<double>(data.prompts.size());
  nlohmann::json result = {
      {"backend", "radixlm"},
      {"model", cfg.architecture},
      {"device", device},
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
              device.c_str(), data.prompts.size(), static_cast<long long>(input_tokens),
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

}  // namespace rlm::bench
