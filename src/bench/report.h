// Output of `radixlm bench serve`: SGLang-style result table and the JSON result file.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/metrics.h"

namespace rlm::bench {

struct ReportHeader {
  std::string backend;
  std::string model;
  std::string dataset;
  double request_rate = 0;
  int64_t max_concurrency = 0;  // 0: not set
};

// Prints the result table (times in ms, throughputs per second); with failures, their count per
// kind and the first error.
void print_report(std::FILE* out, const ReportHeader& header, const BenchMetrics& m);

// Flat metric keys as SGLang's bench_serving writes them: completed, duration,
// total_input_tokens, request_throughput, ..., mean_ttft_ms, median_ttft_ms, std_ttft_ms,
// p90_ttft_ms, p95_ttft_ms, p99_ttft_ms, and the same for tpot, itl and e2e_latency.
nlohmann::json metrics_to_json(const BenchMetrics& m);

// Per-request details (timings in seconds, like SGLang's --output-details).
nlohmann::json outcomes_to_json(const std::vector<RequestOutcome>& outcomes);

// {metrics..., "args": args, "requests": [...]}
nlohmann::json result_json(const BenchMetrics& m, const nlohmann::json& args,
                           const std::vector<RequestOutcome>& outcomes);

}  // namespace rlm::bench
