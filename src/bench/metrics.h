// Per-request results and the aggregate serving metrics of `radixlm bench serve`, with the
// definitions of SGLang's bench_serving / vLLM's `bench serve`:
//
// - completed: successful requests; failed requests are counted apart and excluded from every
//   other metric.
// - duration: wall time from the first request's dispatch to the last request's completion.
// - request throughput = completed / duration; input (output) token throughput = sum of the
//   completed requests' input (output) tokens / duration; total = input + output.
// - TTFT: request sent -> first chunk carrying generated text.
// - ITL: the gaps between successive text-carrying chunks of a request, pooled over all requests.
//   A chunk that carries several tokens contributes ONE gap (vLLM's convention; SGLang's
//   /generate client instead spreads the gap evenly over the chunk's tokens).
// - TPOT: per request (E2E - TTFT) / (output_tokens - 1); requests with <= 1 output token excluded.
// - E2E latency: request sent -> last byte of the response.
// - concurrency: sum of E2E latencies / duration (average number of requests in flight).
// Each latency has mean, median, std (population), p90, p95 and p99 (linear interpolation between
// order statistics, numpy's default), reported in milliseconds.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rlm::bench {

struct RequestOutcome {
  bool success = false;
  std::string error;            // why it failed (empty on success)
  std::string error_kind;       // its class: "connect refused", "connect timeout", "connect error",
                                // "write error", "read error", "timeout", "HTTP status N",
                                // "stream error" (error event, malformed or unfinished stream), "not sent"
  int64_t conversation = -1;    // index in the dataset
  int64_t turn = 0;             // turn within the conversation
  int64_t planned_input_len = 0;
  int64_t input_len = 0;        // server-reported prompt_tokens if any, else planned_input_len
  int64_t output_len = 0;       // server-reported completion_tokens if any, else chunks counted
  int64_t max_tokens = 0;
  bool usage_reported = false;  // output_len/input_len came from the server's usage
  int64_t num_chunks = 0;       // text-carrying chunks received
  double start_s = 0.0;         // send time, seconds since the benchmark start
  double ttft_s = 0.0;
  double latency_s = 0.0;       // E2E
  std::vector<double> itl_s;    // gaps between successive text-carrying chunks
  std::string generated_text;
};

struct LatencyStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0, p90_ms = 0, p95_ms = 0, p99_ms = 0;
  int64_t count = 0;
};

struct BenchMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  std::string first_error;
  std::map<std::string, int64_t> failures_by_kind;  // error_kind -> count
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;
  double input_throughput = 0;
  double output_throughput = 0;
  double total_throughput = 0;
  double concurrency = 0;
  LatencyStats ttft, tpot, itl, e2e;
};

// numpy.percentile(values, q) with the default linear method; `sorted` ascending, non-empty.
double percentile_sorted(const std::vector<double>& sorted, double q);

// Summary of latencies given in seconds (reported in ms); all zero for an empty list.
LatencyStats summarize_latencies(std::vector<double> values_s);

BenchMetrics compute_metrics(const std::vector<RequestOutcome>& outcomes, double duration_s);

}  // namespace rlm::bench
