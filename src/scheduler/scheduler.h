// Scheduler: one thread owns every mutable serving structure — requests, the page allocator,
// the request->token table and the prefix cache — and runs continuous batching: each step it
// drains the inbox (new requests, aborts), admits pending requests prefill-first within a token
// budget (chunked prefill, KV room reserved for running requests), or decodes the running set,
// retracting the least-advanced request when KV runs out. See docs/design/scheduler.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/page_allocator.h"
#include "cache/prefix_cache.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"
#include "scheduler/step_executor.h"

namespace rlm {

struct SchedulerConfig {
  int64_t max_running_requests = 64;
  int64_t chunked_prefill_size = 2048;  // most prompt tokens of one request per step
  int64_t max_prefill_tokens = 8192;    // most prompt tokens in one prefill step
  std::string policy = "fcfs";          // "fcfs" | "lpm" (longest prefix match first)
  std::string cache = "radix";          // "radix" | "naive"
  int64_t mamba_chunk_size = 64;        // hybrid models: recurrent-state snapshot granularity
  int64_t max_context_len = 0;          // prompt + max_tokens limit; 0: the req_to_token width
  int64_t max_queued_requests = 4096;   // submit() answers kUnavailable beyond this
  double init_new_token_ratio = 0.7;    // share of running requests' remaining tokens reserved
  double min_new_token_ratio = 0.1;
  double new_token_ratio_decay = 0.002; // per decode step
  bool check_integrity_when_idle = true;
  // Overlap scheduling: while the device runs decode step N, the scheduler builds and launches
  // step N+1 (whose input tokens are N's samples, read in device memory) and only then processes
  // N's results. Used in steady decoding (no request waiting for prefill) when every running
  // request samples on the device; otherwise steps run one at a time.
  bool overlap_schedule = true;
};

class Scheduler {
 public:
  Scheduler(StepExecutor& executor, const SchedulerConfig& config, TokenTextDecoderFactory decoders,
            std::shared_ptr<ServingMetrics> metrics = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // --- thread-safe API ---
  // Validates and enqueues; errors (400-style kInvalidArgument, queue full kUnavailable) leave
  // nothing behind. Events arrive on req->stream.
  Status submit(std::shared_ptr<Req> req);
  // The checks submit() makes on the request itself (prompt ids, parameters, context and KV room),
  // without enqueuing it.
  Status validate(const Req& req) const;
  // Aborts the queued or running requests whose rid or parent_rid is exactly `rid` (one sequence,
  // or every choice of an API request); no-op for unknown/finished ids; takes effect at the next
  // step. Never a prefix match: one client's id cannot reach another's requests.
  void abort(const std::string& rid);
  void start();               // runs the loop on its own thread
  void stop(bool drain);      // drain: finish in-flight requests first; else abort them
  // Asks the scheduler thread to evict every unlocked prefix-cache entry when it is next idle;
  // returns a ticket for wait_flush().
  uint64_t request_flush();
  // Waits until the flush named by `ticket` (or a later one) has run; false on timeout (the flush
  // still runs when the scheduler is next idle).
  bool wait_flush(uint64_t ticket, std::chrono::milliseconds timeout);
  const SchedulerConfig& config() const { return config_; }
  ServingMetrics& metrics() { return *metrics_; }

  // --- scheduler-thread API (tests call these directly without start()) ---
  // Drains the inbox and runs at most one batch. Returns false when there was nothing to run.
  bool step();
  bool has_work() const;
  // Allocator, cache and requests account for every page; the cache's own invariants hold.
  Status check_integrity() const;
  const PrefixCache& cache() const { return *cache_; }
  int64_t num_free_pages() const { return allocator_.num_free(); }
  int64_t num_free_mamba_slots() const { return mamba_ ? mamba_->num_free() : 0; }
  int64_t mamba_evictions() const { return mamba_evictions_; }  // snapshots evicted for a free slot
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_pending() const { return static_cast<int64_t>(pending_.size()); }
  // Evicts every unlocked cache entry (e.g. for tests checking that all KV returns to the pool).
  void flush_cache();

 private:
  void drain_inbox();
  void admit_new(std::shared_ptr<Req> req);
  void do_aborts();
  bool run_prefill();
  bool run_decode();
  // Decode items for every running request at position kv_len + ahead (ahead = 1: the in-flight
  // step's token is still being sampled); false when KV room is short.
  bool decode_items(int64_t ahead, std::vector<StepItem>& items);
  bool overlap_ok() const;
  // Launches the step after the in-flight one and then processes the in-flight one; false (and
  // nothing done) when the next step cannot be launched ahead.
  bool launch_next_decode();
  // Waits for the in-flight step and processes its results.
  void complete_inflight();
  void process_results(const std::vector<StepItem>& items, const std::vector<SampleResult>& results, ForwardMode mode,
                       bool skip_finished = false);
  void on_token(Req& req, const SampleResult& r);
  void finish(Req& req, FinishInfo info);
  void release(Req& req, bool cache_kv);
  void cache_prefix(Req& req, bool finished);
  void retract(Req& req);
  // Frees the request's own pages, unlocks its cached prefix and returns its request slot.
  void drop_kv(Req& req);
  bool alloc_pages(int64_t n, std::vector<int32_t>& out);  // evicts from the cache when needed
  // Hybrid models: a MambaPool slot, evicting a cached snapshot when the pool is dry; -1 if none.
  int32_t alloc_mamba_slot();
  void free_mamba_slots(Req& req);  // working and snapshot slots
  // Fills the entry's working slot and, when this step reaches a chunk-aligned position, asks the
  // model for a snapshot there (the branching point if reached, else the last aligned position).
  void plan_mamba(Req& req, BatchEntry& entry);
  // Slots for positions [from, to) of req, allocating pages as needed; false when KV is short.
  bool extend_slots(Req& req, int64_t from, int64_t to, std::vector<int32_t>& slots);
  int64_t pages_needed(const Req& req, int64_t to) const;
  void publish_gauges();
  void fail_all(const std::string& error);
  void loop();

  StepExecutor& exec_;
  SchedulerConfig config_;
  TokenTextDecoderFactory decoders_;
  std::shared_ptr<ServingMetrics> metrics_;
  const int64_t page_size_;
  PageAllocator allocator_;
  std::unique_ptr<PrefixCache> cache_;
  MambaPool* mamba_ = nullptr;  // hybrid models only
  int64_t mamba_align_ = 0;     // snapshot positions (0: the cache keeps no snapshots, e.g. naive)
  int64_t mamba_evictions_ = 0;
  std::vector<int64_t> eos_ids_;
  std::mt19937_64 seed_rng_;

  // Owned by the scheduler thread.
  std::deque<std::shared_ptr<Req>> pending_;  // admission order (front first)
  std::vector<std::shared_ptr<Req>> running_;
  double new_token_ratio_;
  // Overlap scheduling: the launched decode step whose results are not processed yet, its items and
  // (kept alive until then) its requests.
  std::unique_ptr<LaunchedStep> inflight_;
  std::vector<StepItem> inflight_items_;
  std::vector<std::shared_ptr<Req>> inflight_reqs_;

  // Inbox (guarded by mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Req>> inbox_;
  std::vector<std::string> abort_inbox_;
  int64_t queued_count_ = 0;  // inbox + pending, for the queue limit
  std::unordered_map<std::string, std::weak_ptr<Req>> live_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> drain_{false};
  uint64_t flush_requested_ = 0;  // guarded by mu_: tickets handed out
  uint64_t flush_done_ = 0;       // guarded by mu_: the last ticket whose flush has run
  std::condition_variable flush_cv_;
};

}  // namespace rlm
