#include "scheduler/metrics.h"

#include <algorithm>
#include <sstream>

#include "core/check.h"

namespace rlm {

const std::vector<double> LatencyBuckets::kTtft = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                                   0.5,   0.75,  1.0,  2.5,  5.0,  7.5,  10.0, 20.0};
const std::vector<double> LatencyBuckets::kItl = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
                                                  0.075, 0.1,   0.15, 0.2,   0.3,  0.4,   0.5,  1.0};
const std::vector<double> LatencyBuckets::kE2e = {0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0};
// vLLM v1's buckets (vllm/v1/metrics/loggers.py) for the vllm:* histograms.
const std::vector<double> LatencyBuckets::kVllmTtft = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                       0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                                       20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> LatencyBuckets::kVllmItl = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> LatencyBuckets::kVllmE2e = {0.3,  0.5,  0.8,   1.0,   1.5,   2.0,   2.5,
                                                      5.0,  10.0, 15.0,  20.0,  30.0,  40.0,  50.0,
                                                      60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  RLM_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()) &&
            std::adjacent_find(bounds_.begin(), bounds_.end()) == bounds_.end())
      << "histogram bounds must be strictly increasing";
}

std::vector<double> Histogram::merged(std::initializer_list<std::vector<double>> lists) {
  std::vector<double> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_;
}

double Histogram::sum() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sum_;
}

std::string Histogram::render(const std::string& name, const std::string& help, const std::string& labels,
                              const std::vector<double>& bounds) const {
  const std::vector<double>& shown = bounds.empty() ? bounds_ : bounds;
  const std::string sep = labels.empty() ? "" : ",";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cum = 0;
  size_t i = 0;  // next own bucket to add
  for (double b : shown) {
    const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), b);
    RLM_CHECK(it != bounds_.end() && *it == b) << "bucket " << b << " is not a bound of " << name;
    for (const size_t end = static_cast<size_t>(it - bounds_.begin()); i <= end; ++i) cum += counts_[i];
    os << name << "_bucket{" << labels << sep << "le=\"" << b << "\"} " << cum << "\n";
  }
  for (; i < counts_.size(); ++i) cum += counts_[i];
  os << name << "_bucket{" << labels << sep << "le=\"+Inf\"} " << cum << "\n";
  os << name << "_sum" << braces << " " << sum_ << "\n" << name << "_count" << braces << " " << n_ << "\n";
  return os.str();
}

ServingMetrics::ServingMetrics() = default;

void ServingMetrics::add_prompt_tokens(int64_t total, int64_t cached) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += total;
  cached_tokens_ += cached;
}

void ServingMetrics::add_generation_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_tokens_ += n;
}

void ServingMetrics::add_prefill_computed(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  prefill_computed_ += n;
}

void ServingMetrics::add_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason == "stop") ++finished_stop_;
  else if (reason == "length") ++finished_length_;
  else ++finished_abort_;
}

void ServingMetrics::add_retraction() {
  std::lock_guard<std::mutex> lock(mu_);
  ++retractions_;
}

void ServingMetrics::add_decode_step(bool overlapped) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(overlapped ? overlapped_decode_steps_ : sequential_decode_steps_);
}

void ServingMetrics::add_mixed_step() {
  std::lock_guard<std::mutex> lock(mu_);
  ++mixed_steps_;
}

int64_t ServingMetrics::mixed_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mixed_steps_;
}

int64_t ServingMetrics::overlapped_decode_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overlapped_decode_steps_;
}

int64_t ServingMetrics::sequential_decode_steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sequential_decode_steps_;
}

void ServingMetrics::set_gauges(const SchedulerGauges& g) {
  std::lock_guard<std::mutex> lock(mu_);
  gauges_ = g;
}

SchedulerGauges ServingMetrics::gauges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gauges_;
}

int64_t ServingMetrics::retractions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retractions_;
}

int64_t ServingMetrics::cached_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_tokens_;
}

MetricsCounters ServingMetrics::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {prompt_tokens_,   cached_tokens_,  generation_tokens_, prefill_computed_,
          retractions_,     finished_stop_,  finished_length_,   finished_abort_};
}

std::string ServingMetrics::render_prometheus() const {
  std::ostringstream os;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto gauge = [&](const char* name, const char* help, double v) {
      os << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << v << "\n";
    };
    auto counter = [&](const char* name, const char* help, double v) {
      os << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << v << "\n";
    };
    const auto& g = gauges_;
    gauge("radixlm_num_running_reqs", "Requests in the running (decode) set", static_cast<double>(g.running));
    gauge("radixlm_num_queue_reqs", "Requests waiting for admission", static_cast<double>(g.queued));
    gauge("radixlm_kv_pages_total", "KV pages in the pool", static_cast<double>(g.kv_pages_total));
    gauge("radixlm_kv_pages_free", "KV pages free", static_cast<double>(g.kv_pages_free));
    const double used = g.kv_pages_total > 0
                            ? 1.0 - static_cast<double>(g.kv_pages_free) / static_cast<double>(g.kv_pages_total)
                            : 0.0;
    gauge("radixlm_kv_usage", "Fraction of KV pages in use (requests and prefix cache)", used);
    gauge("radixlm_prefix_cache_tokens", "Tokens held by the prefix cache", static_cast<double>(g.cache_tokens));
    gauge("radixlm_prefix_cache_evictable_tokens", "Prefix-cache tokens that eviction could free",
          static_cast<double>(g.cache_evictable));
    const double hit = prompt_tokens_ > 0 ? static_cast<double>(cached_tokens_) / static_cast<double>(prompt_tokens_)
                                          : 0.0;
    gauge("radixlm_cache_hit_rate", "Prompt tokens served from the prefix cache / all prompt tokens", hit);
    counter("radixlm_prompt_tokens_total", "Prompt tokens admitted", static_cast<double>(prompt_tokens_));
    counter("radixlm_cached_tokens_total", "Prompt tokens served from the prefix cache",
            static_cast<double>(cached_tokens_));
    counter("radixlm_prefill_computed_tokens_total", "Prompt tokens run through the model (not served from cache)",
            static_cast<double>(prefill_computed_));
    counter("radixlm_generation_tokens_total", "Tokens generated", static_cast<double>(generation_tokens_));
    counter("radixlm_retractions_total", "Requests retracted for KV space", static_cast<double>(retractions_));
    counter("radixlm_mixed_steps_total", "Steps carrying decode tokens and prompt chunks together",
            static_cast<double>(mixed_steps_));
    os << "# HELP radixlm_decode_steps_total Steps with decode tokens, launched ahead (overlap) or run at once "
          "(sequential)\n"
       << "# TYPE radixlm_decode_steps_total counter\n"
       << "radixlm_decode_steps_total{mode=\"overlap\"} " << overlapped_decode_steps_ << "\n"
       << "radixlm_decode_steps_total{mode=\"sequential\"} " << sequential_decode_steps_ << "\n";
    os << "# HELP radixlm_requests_finished_total Finished requests by reason\n"
       << "# TYPE radixlm_requests_finished_total counter\n"
       << "radixlm_requests_finished_total{reason=\"stop\"} " << finished_stop_ << "\n"
       << "radixlm_requests_finished_total{reason=\"length\"} " << finished_length_ << "\n"
       << "radixlm_requests_finished_total{reason=\"abort\"} " << finished_abort_ << "\n";
  }
  os << ttft.render("radixlm_time_to_first_token_seconds", "Time to first token", "", LatencyBuckets::kTtft);
  os << itl.render("radixlm_inter_token_latency_seconds", "Time between consecutive output tokens", "",
                   LatencyBuckets::kItl);
  os << e2e.render("radixlm_e2e_request_latency_seconds", "Arrival to finish", "", LatencyBuckets::kE2e);
  return os.str();
}

}  // namespace rlm
