#include "scheduler/inbox.h"

namespace rlm {

Status Inbox::submit(std::shared_ptr<Req> req, int64_t max_queued) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Status(StatusCode::kUnavailable, "the server is shutting down");
    if (queued_ >= max_queued) {
      return Status(StatusCode::kUnavailable, str("the request queue is full (", max_queued, ")"));
    }
    auto it = live_.find(req->rid);
    if (it != live_.end() && !it->second.expired()) {
      return invalid_argument(str("request id '", req->rid, "' is already in use"));
    }
    live_[req->rid] = req;
    ++queued_;
    requests_.push_back(std::move(req));
  }
  cv_.notify_all();
  return Status::ok();
}

void Inbox::abort(const std::string& rid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(rid);
  }
  cv_.notify_all();
}

void Inbox::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool Inbox::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

uint64_t Inbox::request_flush() {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = ++flush_requested_;
  }
  cv_.notify_all();
  return ticket;
}

bool Inbox::wait_flush(uint64_t ticket, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return flush_cv_.wait_for(lock, timeout, [&] { return flush_done_ >= ticket; });
}

Inbox::Drained Inbox::drain() {
  Drained d;
  std::lock_guard<std::mutex> lock(mu_);
  d.requests.swap(requests_);
  d.aborts.swap(aborts_);
  return d;
}

bool Inbox::has_messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !requests_.empty() || !aborts_.empty();
}

int64_t Inbox::num_waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(requests_.size());
}

void Inbox::count_queued(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_ += n;
}

void Inbox::forget(const std::string& rid) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(rid);
}

uint64_t Inbox::flush_due() const {
  std::lock_guard<std::mutex> lock(mu_);
  return flush_requested_ > flush_done_ ? flush_requested_ : 0;
}

void Inbox::flush_served(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    flush_done_ = std::max(flush_done_, ticket);
  }
  flush_cv_.notify_all();
}

void Inbox::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] {
    return !requests_.empty() || !aborts_.empty() || closed_ || flush_requested_ > flush_done_;
  });
}

}  // namespace rlm
