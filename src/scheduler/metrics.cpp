#include "scheduler/metrics.h"

#include <sstream>

namespace rlm {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

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

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    os << name << "_bucket{le=\"" << bounds_[i] << "\"} " << cum << "\n";
  }
  cum += counts_.back();
  os << name << "_bucket{le=\"+Inf\"} " << cum << "\n";
  os << name << "_sum " << sum_ << "\n" << name << "_count " << n_ << "\n";
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
  os << ttft.render("radixlm_time_to_first_token_seconds", "Time to first token");
  os << itl.render("radixlm_inter_token_latency_seconds", "Time between consecutive output tokens");
  os << e2e.render("radixlm_e2e_request_latency_seconds", "Arrival to finish");
  return os.str();
}

}  // namespace rlm
