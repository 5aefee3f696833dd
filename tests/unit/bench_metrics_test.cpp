// Serving metrics of `radixlm bench serve` against a straightforward reference computed here from
// synthetic request timestamps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bench/metrics.h"
#include "bench/report.h"
#include "bench/request_client.h"

namespace rlm::bench {
namespace {

// Reference percentile: numpy's linear method, from its definition (rank (n-1)*q/100 in the
// sorted sample, interpolated between the neighbouring order statistics via nth_element).
double ref_percentile(std::vector<double> v, double q) {
  const double rank = (static_cast<double>(v.size()) - 1) * q / 100.0;
  const size_t lo = static_cast<size_t>(rank);
  std::nth_element(v.begin(), v.begin() + lo, v.end());
  const double a = v[lo];
  if (lo + 1 >= v.size()) return a;
  const double b = *std::min_element(v.begin() + lo + 1, v.end());
  return a + (b - a) * (rank - static_cast<double>(lo));
}

void expect_stats(const LatencyStats& s, const std::vector<double>& values_s, const char* what) {
  ASSERT_EQ(s.count, static_cast<int64_t>(values_s.size())) << what;
  long double sum = 0;
  for (double v : values_s) sum += v;
  const long double mean = sum / values_s.size();
  long double sq = 0;
  for (double v : values_s) sq += (v - mean) * (v - mean);
  const double tol = 1e-9;
  EXPECT_NEAR(s.mean_ms, static_cast<double>(mean) * 1e3, tol) << what;
  EXPECT_NEAR(s.std_ms, std::sqrt(static_cast<double>(sq / values_s.size())) * 1e3, tol) << what;
  EXPECT_NEAR(s.median_ms, ref_percentile(values_s, 50) * 1e3, tol) << what;
  EXPECT_NEAR(s.p90_ms, ref_percentile(values_s, 90) * 1e3, tol) << what;
  EXPECT_NEAR(s.p95_ms, ref_percentile(values_s, 95) * 1e3, tol) << what;
  EXPECT_NEAR(s.p99_ms, ref_percentile(values_s, 99) * 1e3, tol) << what;
}

TEST(BenchPercentile, KnownByConstruction) {
  std::vector<double> v;
  for (int i = 0; i <= 100; ++i) v.push_back(i);  // the q-th percentile of 0..100 is q
  for (double q : {0.0, 1.0, 33.0, 50.0, 90.0, 99.0, 100.0, 12.5}) {
    EXPECT_DOUBLE_EQ(percentile_sorted(v, q), q);
  }
  EXPECT_DOUBLE_EQ(percentile_sorted({1, 2, 3, 4}, 50), 2.5);  // the mean of the middle pair
  EXPECT_DOUBLE_EQ(percentile_sorted({7}, 99), 7);
}

struct Synthetic {
  double send;                 // absolute send time
  std::vector<double> chunks;  // absolute arrival times of text chunks
  double end;
  int64_t usage_tokens;        // -1: no usage chunk
  int64_t prompt_len;
  bool fail;
};

TEST(BenchMetrics, MatchReferenceFromTimestamps) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.001, 0.05);
  std::vector<Synthetic> reqs;
  for (int i = 0; i < 37; ++i) {
    Synthetic s;
    s.send = u(rng) * 20 * i;
    double t = s.send + 5 * u(rng);
    const int k = 1 + static_cast<int>(rng() % 12);
    for (int c = 0; c < k; ++c) {
      s.chunks.push_back(t);
      t += u(rng);
    }
    s.end = t;
    s.usage_tokens = i % 3 == 0 ? -1 : k + static_cast<int>(rng() % 3);  // chunks may carry >1 token
    s.prompt_len = 10 + static_cast<int>(rng() % 100);
    s.fail = i % 9 == 4;
    reqs.push_back(s);
  }
  std::vector<RequestOutcome> outcomes;
  for (const Synthetic& s : reqs) {
    StreamAccumulator acc(Backend::kOpenAiCompletions);
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      const bool last = c + 1 == s.chunks.size();
      acc.on_event(str(R"({"choices":[{"text":"t)", c, R"(","finish_reason":)",
                       last ? "\"length\"" : "null", "}]}"),
                   s.chunks[c] - s.send);
    }
    if (s.usage_tokens >= 0) {
      acc.on_event(str(R"({"choices":[],"usage":{"prompt_tokens":)", s.prompt_len,
                       R"(,"completion_tokens":)", s.usage_tokens, "}}"),
                   s.end - s.send);
    }
    if (s.fail) acc.on_event(R"({"error":{"message":"boom"}})", s.end - s.send);
    acc.on_event("[DONE]", s.end - s.send);
    RequestOutcome o;
    o.planned_input_len = s.prompt_len;
    acc.finish(s.end - s.send, o);
    outcomes.push_back(o);
  }
  const double duration = 3.5;
  BenchMetrics m = compute_metrics(outcomes, duration);

  std::vector<double> ttft, itl, tpot, e2e;
  int64_t completed = 0, failed = 0, in_tokens = 0, out_tokens = 0;
  for (const Synthetic& s : reqs) {
    if (s.fail) {
      ++failed;
      continue;
    }
    ++completed;
    const int64_t out = s.usage_tokens >= 0 ? s.usage_tokens : static_cast<int64_t>(s.chunks.size());
    in_tokens += s.prompt_len;
    out_tokens += out;
    ttft.push_back(s.chunks[0] - s.send);
    e2e.push_back(s.end - s.send);
    for (size_t c = 1; c < s.chunks.size(); ++c) itl.push_back(s.chunks[c] - s.chunks[c - 1]);
    if (out > 1) tpot.push_back((s.end - s.chunks[0]) / static_cast<double>(out - 1));
  }
  EXPECT_EQ(m.completed, completed);
  EXPECT_EQ(m.failed, failed);
  EXPECT_NE(m.first_error.find("boom"), std::string::npos);
  EXPECT_EQ(m.total_input_tokens, in_tokens);
  EXPECT_EQ(m.total_output_tokens, out_tokens);
  EXPECT_DOUBLE_EQ(m.request_throughput, completed / duration);
  EXPECT_DOUBLE_EQ(m.input_throughput, in_tokens / duration);
  EXPECT_DOUBLE_EQ(m.output_throughput, out_tokens / duration);
  EXPECT_DOUBLE_EQ(m.total_throughput, (in_tokens + out_tokens) / duration);
  double e2e_sum = 0;
  for (double v : e2e) e2e_sum += v;
  EXPECT_NEAR(m.concurrency, e2e_sum / duration, 1e-12);
  expect_stats(m.ttft, ttft, "ttft");
  expect_stats(m.itl, itl, "itl");
  expect_stats(m.tpot, tpot, "tpot");
  expect_stats(m.e2e, e2e, "e2e");

  nlohmann::json j = metrics_to_json(m);
  EXPECT_EQ(j["completed"], completed);
  EXPECT_DOUBLE_EQ(j["p99_itl_ms"].get<double>(), m.itl.p99_ms);
  EXPECT_DOUBLE_EQ(j["median_e2e_latency_ms"].get<double>(), m.e2e.median_ms);
}

TEST(BenchMetrics, AllFailedGivesZeroLatencies) {
  std::vector<RequestOutcome> outs(3);
  for (auto& o : outs) o.error = "connection refused";
  BenchMetrics m = compute_metrics(outs, 1.0);
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 3);
  EXPECT_EQ(m.first_error, "connection refused");
  EXPECT_EQ(m.ttft.count, 0);
  EXPECT_EQ(m.ttft.mean_ms, 0.0);
}

}  // namespace
}  // namespace rlm::bench
