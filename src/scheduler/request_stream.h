// The channel from the scheduler thread to whoever serves one request: text/token deltas as they
// are produced, then one final event. Offline callers block in pop(); the HTTP server registers a
// listener instead, which the pushing thread calls after each event so that the request's
// connection can collect it with try_pop() without any thread waiting.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
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
  // prompt_logprobs requests: logprobs of the next prompt tokens (events before the first token
  // carry them in order, from prompt position 1 on).
  std::vector<TokenLogprob> prompt_logprobs{};
};

class RequestStream {
 public:
  using Listener = std::function<void()>;

  void push(StreamEvent event) {
    std::shared_ptr<const Listener> listener;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(event));
      listener = listener_;
    }
    cv_.notify_all();
    if (listener) (*listener)();
  }
  // `fn` runs on the pushing thread (the scheduler's) after every push, without the stream's lock
  // held, and once now if events are already waiting; it must not block. nullptr removes it (a
  // call already under way may still finish).
  void set_listener(Listener fn) {
    std::shared_ptr<const Listener> listener = fn ? std::make_shared<const Listener>(std::move(fn)) : nullptr;
    bool waiting = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      listener_ = listener;
      waiting = !events_.empty();
    }
    if (listener && waiting) (*listener)();
  }
  // The next event if one is waiting.
  std::optional<StreamEvent> try_pop() {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.empty()) return std::nullopt;
    StreamEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
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
  std::shared_ptr<const Listener> listener_;
};

}  // namespace rlm
