// The channel from the scheduler thread to the thread serving one request (HTTP handler or
// offline caller): text/token deltas as they are produced, then one final event.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"  // TokenLogprob

namespace rlm {

struct FinishInfo {
  std::string reason;                 // "stop", "length", "abort"
  std::optional<std::string> matched_stop_str;
  std::optional<int32_t> matched_stop_token;
  std::string error;                  // set when the request failed inside the engine
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;          // prompt tokens served from the prefix cache
};

struct StreamEvent {
  std::string text;                   // new text (complete UTF-8, stop strings removed)
  std::vector<int32_t> token_ids;     // new tokens
  std::vector<TokenLogprob> logprobs; // one per new token when logprobs were requested
  std::optional<FinishInfo> finish;   // the last event carries this
};

class RequestStream {
 public:
  void push(StreamEvent event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(event));
    }
    cv_.notify_all();
  }
  // Waits up to `timeout` for the next event; nullopt on timeout.
  std::optional<StreamEvent> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
    StreamEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
};

}  // namespace rlm
