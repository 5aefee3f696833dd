// Serving metrics recorded by the scheduler thread and read by /metrics: counters, gauges and
// latency histograms (Prometheus cumulative-bucket semantics). Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rlm {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Prometheus text lines for `name` (buckets, +Inf, sum, count).
  std::string render(const std::string& name, const std::string& help) const;
  uint64_t count() const;

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

class ServingMetrics {
 public:
  ServingMetrics();
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0}};
  Histogram itl{{0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1.0}};
  Histogram e2e{{0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0}};

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
