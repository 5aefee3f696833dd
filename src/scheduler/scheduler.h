// Scheduler: continuous batching on one thread that owns every mutable serving structure. Each step
// it drains the inbox (new requests, aborts), schedules a batch — the decode token of every running
// request plus prompt chunks within a token budget (a mixed step; PrefillAdder) — launches it, and
// processes the results of the step before (overlap scheduling) or of this one. KV pages, request
// rows and state slots go through the KvLedger. See docs/design/scheduler.md.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/inbox.h"
#include "scheduler/kv_ledger.h"
#include "scheduler/metrics.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/step_executor.h"

namespace rlm {

// One step as scheduled: decode items first (one token each), then prompt chunks.
struct ScheduledBatch {
  ForwardMode mode = ForwardMode::kDecode;  // kExtend when any prompt chunk is in it
  std::vector<StepItem> items;
  std::vector<std::shared_ptr<Req>> reqs;  // [items.size()] the items' requests, alive until processed
  int64_t num_decode = 0;                  // items [0, num_decode) are decode items
  int64_t num_prefill_tokens = 0;
  std::set<std::string> prefill_groups;  // n > 1 groups with a prompt chunk in this step
  bool empty() const { return items.empty(); }
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
  uint64_t request_flush() { return inbox_.request_flush(); }
  // Waits until the flush named by `ticket` (or a later one) has run; false on timeout (the flush
  // still runs when the scheduler is next idle).
  bool wait_flush(uint64_t ticket, std::chrono::milliseconds timeout) { return inbox_.wait_flush(ticket, timeout); }
  const SchedulerConfig& config() const { return config_; }
  ServingMetrics& metrics() { return *metrics_; }

  // --- scheduler-thread API (tests call these directly without start()) ---
  // Drains the inbox and runs at most one step (with overlap: launches the next step and processes
  // the one in flight). Returns false when there was nothing to do.
  bool step();
  bool has_work() const;
  // Allocator, cache and requests account for every page; the cache's own invariants hold.
  Status check_integrity() const;
  const PrefixCache& cache() const { return kv_.cache(); }
  // Reports the prefix cache's changes to observer (cache_events.h); call before start().
  void set_cache_observer(CacheEventObserver* observer) { kv_.cache().set_observer(observer); }
  int64_t num_free_pages() const { return kv_.num_free_pages(); }
  int64_t num_free_mamba_slots() const { return kv_.hybrid() ? kv_.hybrid()->num_free() : 0; }
  int64_t mamba_evictions() const { return kv_.hybrid() ? kv_.hybrid()->evictions() : 0; }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_pending() const { return static_cast<int64_t>(pending_.size()); }
  // Evicts every unlocked cache entry (e.g. for tests checking that all KV returns to the pool).
  void flush_cache();

 private:
  // --- drain the inbox ---
  void drain_inbox();
  void finish_aborted();
  // --- schedule ---
  // The next step from the current state; with a step in flight (ahead), from the state that step
  // leaves. nullopt (ahead only): the step cannot be planned without retracting a request.
  std::optional<ScheduledBatch> schedule(bool ahead);
  // Decode items for the running requests (ahead: not those the in-flight step ends by length).
  // Without ahead, the least advanced requests are retracted until everyone's next token has room;
  // ahead, a shortage adds nothing (kShort).
  enum class DecodeRoom { kFits, kRetracted, kShort };
  DecodeRoom add_decode_items(ScheduledBatch& b, bool ahead);
  void add_prefill_chunks(ScheduledBatch& b, int64_t token_budget);
  bool overlap_ok() const;
  // --- launch ---
  // The batch's items are in flight from here on: in-flight counters, pending -> running for
  // requests whose prompt completes, metrics.
  void commit(const ScheduledBatch& b, bool launched);
  void run_now(ScheduledBatch& b);
  std::unique_ptr<LaunchedStep> launch(ScheduledBatch& b);
  // --- process results ---
  void complete_inflight();
  void process_results(const ScheduledBatch& b, const std::vector<SampleResult>& results);
  // Streams the prompt logprobs a step computed for `req` (those not delivered yet).
  void push_prompt_logprobs(Req& req, PromptLogprobs lps);
  void on_token(Req& req, const SampleResult& r);
  void finish(Req& req, FinishInfo info);
  void release(Req& req, bool cache_kv);
  void retract(Req& req);
  void remove_running(const Req& req);

  void publish_gauges();
  void fail_all(const std::string& error);
  void loop();

  StepExecutor& exec_;
  SchedulerConfig config_;
  TokenTextDecoderFactory decoders_;
  std::shared_ptr<ServingMetrics> metrics_;
  KvLedger kv_;
  std::vector<int64_t> eos_ids_;
  std::mt19937_64 seed_rng_;
  Inbox inbox_;

  // Owned by the scheduler thread.
  std::deque<std::shared_ptr<Req>> pending_;  // admission order (front first)
  std::vector<std::shared_ptr<Req>> running_;
  double new_token_ratio_;
  // Overlap scheduling: the launched step whose results are not processed yet.
  struct Inflight {
    std::unique_ptr<LaunchedStep> step;
    ScheduledBatch batch;
  };
  std::optional<Inflight> inflight_;

  std::thread thread_;
  std::atomic<bool> drain_{false};
};

}  // namespace rlm
