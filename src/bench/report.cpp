#include "bench/report.h"

#include <cmath>

namespace rlm::bench {

namespace {

void row(std::FILE* out, const char* name, double v) { std::fprintf(out, "%-40s %-10.2f\n", name, v); }
void row_int(std::FILE* out, const char* name, int64_t v) {
  std::fprintf(out, "%-40s %-10lld\n", name, static_cast<long long>(v));
}
void row_str(std::FILE* out, const char* name, const std::string& v) {
  std::fprintf(out, "%-40s %-10s\n", name, v.c_str());
}
void section(std::FILE* out, const std::string& title) {
  const int width = 50;
  int pad = width - static_cast<int>(title.size());
  int left = pad / 2;
  std::fprintf(out, "%s%s%s\n", std::string(std::max(left, 0), '-').c_str(), title.c_str(),
               std::string(std::max(pad - left, 0), '-').c_str());
}

void latency_rows(std::FILE* out, const char* label, const LatencyStats& s) {
  const std::string l(label);
  row(out, ("Mean " + l + " (ms):").c_str(), s.mean_ms);
  row(out, ("Median " + l + " (ms):").c_str(), s.median_ms);
  row(out, ("P90 " + l + " (ms):").c_str(), s.p90_ms);
  row(out, ("P99 " + l + " (ms):").c_str(), s.p99_ms);
}

void put_stats(nlohmann::json& j, const std::string& name, const LatencyStats& s) {
  j["mean_" + name + "_ms"] = s.mean_ms;
  j["median_" + name + "_ms"] = s.median_ms;
  j["std_" + name + "_ms"] = s.std_ms;
  j["p90_" + name + "_ms"] = s.p90_ms;
  j["p95_" + name + "_ms"] = s.p95_ms;
  j["p99_" + name + "_ms"] = s.p99_ms;
  j["num_" + name + "_samples"] = s.count;
}

}  // namespace

void print_report(std::FILE* out, const ReportHeader& h, const BenchMetrics& m) {
  std::fprintf(out, "\n%s\n", "============ Serving Benchmark Result ============");
  row_str(out, "Backend:", h.backend);
  row_str(out, "Model:", h.model);
  row_str(out, "Dataset:", h.dataset);
  char rate[32];
  std::snprintf(rate, sizeof(rate), "%g", h.request_rate);
  row_str(out, "Traffic request rate:", std::isinf(h.request_rate) ? "inf" : rate);
  row_str(out, "Max request concurrency:",
          h.max_concurrency > 0 ? std::to_string(h.max_concurrency) : "not set");
  row_int(out, "Successful requests:", m.completed);
  row_int(out, "Failed requests:", m.failed);
  row(out, "Benchmark duration (s):", m.duration_s);
  row_int(out, "Total input tokens:", m.total_input_tokens);
  row_int(out, "Total generated tokens:", m.total_output_tokens);
  row(out, "Request throughput (req/s):", m.request_throughput);
  row(out, "Input token throughput (tok/s):", m.input_throughput);
  row(out, "Output token throughput (tok/s):", m.output_throughput);
  row(out, "Total token throughput (tok/s):", m.total_throughput);
  row(out, "Concurrency:", m.concurrency);
  section(out, "End-to-End Latency");
  latency_rows(out, "E2E Latency", m.e2e);
  section(out, "Time to First Token");
  latency_rows(out, "TTFT", m.ttft);
  section(out, "Time per Output Token (excl. 1st token)");
  latency_rows(out, "TPOT", m.tpot);
  section(out, "Inter-Token Latency");
  latency_rows(out, "ITL", m.itl);
  std::fprintf(out, "%s\n", std::string(50, '=').c_str());
  if (m.failed > 0) {
    std::fprintf(out, "Failures by kind:\n");
    for (const auto& [kind, count] : m.failures_by_kind) {
      std::fprintf(out, "  %-38s %lld\n", (kind + ":").c_str(), static_cast<long long>(count));
    }
    std::fprintf(out, "First error: %s\n", m.first_error.c_str());
  }
}

nlohmann::json metrics_to_json(const BenchMetrics& m) {
  nlohmann::json j;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["first_error"] = m.first_error;
  j["failures_by_kind"] = m.failures_by_kind;
  j["duration"] = m.duration_s;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["input_throughput"] = m.input_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_throughput"] = m.total_throughput;
  j["concurrency"] = m.concurrency;
  put_stats(j, "ttft", m.ttft);
  put_stats(j, "tpot", m.tpot);
  put_stats(j, "itl", m.itl);
  put_stats(j, "e2e_latency", m.e2e);
  return j;
}

nlohmann::json outcomes_to_json(const std::vector<RequestOutcome>& outcomes) {
  nlohmann::json arr = nlohmann::json::array();
  for (const RequestOutcome& o : outcomes) {
    arr.push_back({{"conversation", o.conversation},
                   {"turn", o.turn},
                   {"success", o.success},
                   {"error", o.error},
                   {"error_kind", o.error_kind},
                   {"planned_input_len", o.planned_input_len},
                   {"input_len", o.input_len},
                   {"output_len", o.output_len},
                   {"max_tokens", o.max_tokens},
                   {"usage_reported", o.usage_reported},
                   {"num_chunks", o.num_chunks},
                   {"start", o.start_s},
                   {"ttft", o.ttft_s},
                   {"latency", o.latency_s},
                   {"itl", o.itl_s},
                   {"generated_text", o.generated_text}});
  }
  return arr;
}

nlohmann::json result_json(const BenchMetrics& m, const nlohmann::json& args,
                           const std::vector<RequestOutcome>& outcomes) {
  nlohmann::json j = metrics_to_json(m);
  j["args"] = args;
  j["requests"] = outcomes_to_json(outcomes);
  return j;
}

}  // namespace rlm::bench
