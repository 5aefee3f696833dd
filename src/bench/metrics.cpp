#include "bench/metrics.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace rlm::bench {

double percentile_sorted(const std::vector<double>& sorted, double q) {
  RLM_CHECK(!sorted.empty());
  RLM_CHECK(q >= 0.0 && q <= 100.0) << "percentile " << q;
  const double pos = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

LatencyStats summarize_latencies(std::vector<double> values_s) {
  LatencyStats s;
  s.count = static_cast<int64_t>(values_s.size());
  if (values_s.empty()) return s;
  std::sort(values_s.begin(), values_s.end());
  double sum = 0;
  for (double v : values_s) sum += v;
  const double n = static_cast<double>(values_s.size());
  const double mean = sum / n;
  double sq = 0;
  for (double v : values_s) sq += (v - mean) * (v - mean);
  s.mean_ms = mean * 1e3;
  s.std_ms = std::sqrt(sq / n) * 1e3;
  s.median_ms = percentile_sorted(values_s, 50) * 1e3;
  s.p90_ms = percentile_sorted(values_s, 90) * 1e3;
  s.p95_ms = percentile_sorted(values_s, 95) * 1e3;
  s.p99_ms = percentile_sorted(values_s, 99) * 1e3;
  return s;
}

BenchMetrics compute_metrics(const std::vector<RequestOutcome>& outcomes, double duration_s) {
  RLM_CHECK(duration_s > 0.0) << "benchmark duration must be positive, got " << duration_s;
  BenchMetrics m;
  m.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2es;
  for (const RequestOutcome& o : outcomes) {
    if (!o.success) {
      ++m.failed;
      if (m.first_error.empty()) m.first_error = o.error;
      ++m.failures_by_kind[o.error_kind.empty() ? std::string("other") : o.error_kind];
      continue;
    }
    ++m.completed;
    m.total_input_tokens += o.input_len;
    m.total_output_tokens += o.output_len;
    ttfts.push_back(o.ttft_s);
    e2es.push_back(o.latency_s);
    itls.insert(itls.end(), o.itl_s.begin(), o.itl_s.end());
    if (o.output_len > 1) {
      tpots.push_back((o.latency_s - o.ttft_s) / static_cast<double>(o.output_len - 1));
    }
  }
  m.request_throughput = static_cast<double>(m.completed) / duration_s;
  m.input_throughput = static_cast<double>(m.total_input_tokens) / duration_s;
  m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
  m.total_throughput = m.input_throughput + m.output_throughput;
  double e2e_sum = 0;
  for (double v : e2es) e2e_sum += v;
  m.concurrency = e2e_sum / duration_s;
  m.ttft = summarize_latencies(std::move(ttfts));
  m.tpot = summarize_latencies(std::move(tpots));
  m.itl = summarize_latencies(std::move(itls));
  m.e2e = summarize_latencies(std::move(e2es));
  return m;
}

}  // namespace rlm::bench
