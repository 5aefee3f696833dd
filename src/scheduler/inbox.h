// Inbox: how other threads talk to the scheduler thread. Submissions, aborts and cache-flush
// requests wait here (guarded by one mutex) until the scheduler drains them at the start of a
// step; it also keeps the queue limit (requests submitted and not yet running or finished) and
// the ids of live requests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "scheduler/request.h"

namespace rlm {

class Inbox {
 public:
  // --- any thread ---
  // Enqueues `req` (its id must not belong to a live request); kUnavailable when closed or when
  // max_queued requests are queued already.
  Status submit(std::shared_ptr<Req> req, int64_t max_queued);
  void abort(const std::string& rid);
  // Stops taking requests (submit answers kUnavailable) and wakes the scheduler.
  void close();
  bool closed() const;
  // Asks for a cache flush when the scheduler is next idle; returns the ticket wait_flush takes.
  uint64_t request_flush();
  bool wait_flush(uint64_t ticket, std::chrono::milliseconds timeout);

  // --- the scheduler thread ---
  struct Drained {
    std::vector<std::shared_ptr<Req>> requests;
    std::vector<std::string> aborts;
  };
  Drained drain();
  bool has_messages() const;  // requests or aborts waiting
  int64_t num_waiting() const;  // requests not drained yet
  // A queued request started running or finished (n = -1), or went back to the queue (+1).
  void count_queued(int64_t n);
  // The request finished: its id may be used again.
  void forget(const std::string& rid);
  // The newest flush ticket not served yet (0: none); flush_served() marks it done.
  uint64_t flush_due() const;
  void flush_served(uint64_t ticket);
  // Sleeps until a message, a flush request or close() arrives, or `timeout` passes.
  void wait(std::chrono::milliseconds timeout);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable flush_cv_;
  std::vector<std::shared_ptr<Req>> requests_;
  std::vector<std::string> aborts_;
  int64_t queued_ = 0;  // submitted requests not running or finished yet (drained or not)
  std::unordered_map<std::string, std::weak_ptr<Req>> live_;
  bool closed_ = false;
  uint64_t flush_requested_ = 0;  // tickets handed out
  uint64_t flush_done_ = 0;       // the last ticket whose flush has run
};

}  // namespace rlm
