// Serving metrics recorded by the scheduler thread and read by /metrics: counters, gauges and
// latency histograms (Prometheus cumulative-bucket semantics). Thread-safe. /metrics renders them
// twice: under radixlm's own names and under vLLM's (`vllm:*`, server/vllm_metrics.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

namespace rlm {

// Counts observations in the buckets of `bounds`; rendered with those bounds or any subset of them
// (a subset's cumulative counts are exact), so one histogram serves two naming schemes whose
// bucket lists differ: construct it with their union.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  // The sorted union of several bucket lists.
  static std::vector<double> merged(std::initializer_list<std::vector<double>> lists);
  void observe(double v);
  // Prometheus text lines for `name` (buckets, +Inf, sum, count). `labels` (`a="x",b="y"` or
  // empty) go on every line; `bounds` (each one of the histogram's own; all of them when empty)
  // are the `le` buckets shown.
  std::string render(const std::string& name, const std::string& help, const std::string& labels = "",
                     const std::vector<double>& bounds = {}) const;
  uint64_t count() const;
  double sum() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds.size() + 1], non-cumulative
  double sum_ = 0.0;
  uint64_t n_ = 0;
};

struct SchedulerGauges {
  int64_t running = 0;
  int64_t queued = 0;
  int64_t kv_pages_total = 0;
  int64_t kv_pages_free = 0;
  int64_t page_size = 1;
  int64_t cache_tokens = 0;      // tokens held by the prefix cache
  int64_t cache_evictable = 0;
};

// The counters, read together under one lock.
struct MetricsCounters {
  int64_t prompt_tokens = 0;      // prompt tokens of admitted requests
  int64_t cached_tokens = 0;      // of those, served from the prefix cache
  int64_t generation_tokens = 0;
  int64_t prefill_computed = 0;
  int64_t retractions = 0;
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0;
};

// Bucket bounds of the latency histograms under radixlm's names and under vLLM's.
struct LatencyBuckets {
  static const std::vector<double> kTtft, kItl, kE2e;              // radixlm_*
  static const std::vector<double> kVllmTtft, kVllmItl, kVllmE2e;  // vllm:* (vLLM's own lists)
};

class ServingMetrics {
 public:
  ServingMetrics();
  Histogram ttft{Histogram::merged({LatencyBuckets::kTtft, LatencyBuckets::kVllmTtft})};
  Histogram itl{Histogram::merged({LatencyBuckets::kItl, LatencyBuckets::kVllmItl})};
  Histogram e2e{Histogram::merged({LatencyBuckets::kE2e, LatencyBuckets::kVllmE2e})};

  void add_prompt_tokens(int64_t total, int64_t cached);
  void add_generation_tokens(int64_t n);
  void add_prefill_computed(int64_t n);  // prompt tokens actually run through the model
  void add_finished(const std::string& reason);
  void add_retraction();
  // A step with decode tokens (mixed steps included) run by the scheduler: launched ahead of its
  // predecessor's results (overlap scheduling) or run and read at once.
  void add_decode_step(bool overlapped);
  void add_mixed_step();  // a step with decode tokens and prompt chunks
  int64_t mixed_steps() const;
  void set_gauges(const SchedulerGauges& g);
  SchedulerGauges gauges() const;
  int64_t retractions() const;
  int64_t cached_tokens() const;
  MetricsCounters counters() const;
  int64_t overlapped_decode_steps() const;
  int64_t sequential_decode_steps() const;
  std::string render_prometheus() const;

 private:
  mutable std::mutex mu_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, generation_tokens_ = 0, retractions_ = 0, prefill_computed_ = 0;
  int64_t overlapped_decode_steps_ = 0, sequential_decode_steps_ = 0, mixed_steps_ = 0;
  int64_t finished_stop_ = 0, finished_length_ = 0, finished_abort_ = 0;
  SchedulerGauges gauges_;
};

}  // namespace rlm
