#include "server/vllm_metrics.h"

#include <sstream>

namespace rlm {

namespace {

// A label value with Prometheus' escapes (backslash, quote, newline).
std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string render_vllm_metrics(const ServingMetrics& metrics, const std::string& model_name) {
  const std::string labels = "model_name=\"" + label_value(model_name) + "\",engine=\"0\"";
  const SchedulerGauges g = metrics.gauges();
  const MetricsCounters c = metrics.counters();
  std::ostringstream os;
  auto family = [&](const char* name, const char* type, const char* help) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  auto sample = [&](const char* name, double v, const std::string& extra = "") {
    os << name << "{" << labels << extra << "} " << v << "\n";
  };
  family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  sample("vllm:num_requests_running", static_cast<double>(g.running));
  family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  sample("vllm:num_requests_waiting", static_cast<double>(g.queued));
  // Pages neither free nor holding evictable prefix cache (cache nodes are whole pages).
  const int64_t evictable_pages = g.page_size > 0 ? g.cache_evictable / g.page_size : 0;
  const double usage = g.kv_pages_total > 0 ? static_cast<double>(g.kv_pages_total - g.kv_pages_free - evictable_pages) /
                                                  static_cast<double>(g.kv_pages_total)
                                            : 0.0;
  family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  sample("vllm:kv_cache_usage_perc", usage);
  const std::pair<const char*, std::pair<const char*, int64_t>> counters[] = {
      {"vllm:prefix_cache_queries_total", {"Prefix cache queries, in terms of number of queried tokens.", c.prompt_tokens}},
      {"vllm:prefix_cache_hits_total", {"Prefix cache hits, in terms of number of cached tokens.", c.cached_tokens}},
      {"vllm:prompt_tokens_total", {"Number of prefill tokens processed.", c.prompt_tokens}},
      {"vllm:generation_tokens_total", {"Number of generation tokens processed.", c.generation_tokens}},
      {"vllm:num_preemptions_total", {"Cumulative number of preemption from the engine.", c.retractions}},
  };
  for (const auto& [name, v] : counters) {
    family(name, "counter", v.first);
    sample(name, static_cast<double>(v.second));
  }
  family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, n] : {std::pair{"stop", c.finished_stop}, std::pair{"length", c.finished_length},
                                  std::pair{"abort", c.finished_abort}}) {
    sample("vllm:request_success_total", static_cast<double>(n), std::string(",finished_reason=\"") + reason + "\"");
  }
  os << metrics.ttft.render("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                            LatencyBuckets::kVllmTtft);
  os << metrics.itl.render("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels,
                           LatencyBuckets::kVllmItl);
  os << metrics.itl.render("vllm:time_per_output_token_seconds",
                           "Histogram of time per output token in seconds (the older name of "
                           "vllm:inter_token_latency_seconds).",
                           labels, LatencyBuckets::kVllmItl);
  os << metrics.e2e.render("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels,
                           LatencyBuckets::kVllmE2e);
  return os.str();
}

}  // namespace rlm
