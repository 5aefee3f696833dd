// PrefillAdder: the prompt chunks of one step. It walks the pending queue in order and gives each
// request a chunk of min(remaining, the step's token budget, chunked_prefill_size) tokens while the
// budget, the running-request limit and the KV room last:
//   - admission takes a request row and locks the longest cached prefix (KvLedger::admit);
//   - KV room: free + evictable tokens, minus a reservation of remaining_tokens x new_token_ratio
//     for every running request (and for each request this step completes); the first work when
//     nothing runs needs only the room for its chunk. A request that does not fit ends admission
//     (no skipping, so nothing starves);
//   - a chunk that leaves its prompt unfinished ends the step; that request stays first in the
//     queue and is continued next step (so at most one request is partly prefilled);
//   - an n > 1 sibling whose group is being prefilled (this step or one in flight) waits, so the
//     prompt's KV is computed once and matched by the others.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "scheduler/kv_ledger.h"
#include "scheduler/metrics.h"
#include "scheduler/scheduler_config.h"
#include "scheduler/step_executor.h"

namespace rlm {

// Orders the pending queue for admission: kLpm puts the longest cached prefix first (requests that
// already hold KV, i.e. a partly prefilled one, stay first); kFcfs keeps arrival order.
void order_pending(std::deque<std::shared_ptr<Req>>& pending, SchedulePolicy policy, PrefixCache& cache,
                   bool resume_at_snapshots);

struct PrefillBudget {
  int64_t tokens = 0;    // prompt tokens the step may still take
  int64_t chunk = 0;     // most prompt tokens of one request in a step
  int64_t requests = 0;  // requests that may still join the step (the running-request limit)
};

// The most prompt tokens one step prefills for a request that wants prompt logprobs (each
// token then has a row of logits).
inline constexpr int64_t kPromptLogprobsChunk = 256;

struct PrefillChunk {
  std::shared_ptr<Req> req;
  StepItem item;  // item.sample: the chunk completes the request's prompt (the request then runs)
};

class PrefillAdder {
 public:
  PrefillAdder(KvLedger& kv, const SchedulerConfig& config, ServingMetrics& metrics, double new_token_ratio)
      : kv_(kv), config_(config), metrics_(metrics), new_token_ratio_(new_token_ratio) {}

  // The chunks for the step, in pending order. running: the requests that decode (their remaining
  // tokens are reserved); first_work: nothing runs and the step holds nothing else yet.
  // busy_groups: n > 1 groups with a prompt chunk in flight.
  std::vector<PrefillChunk> take(const std::deque<std::shared_ptr<Req>>& pending,
                                 const std::vector<std::shared_ptr<Req>>& running, PrefillBudget budget,
                                 const std::set<std::string>& busy_groups, bool first_work);

 private:
  KvLedger& kv_;
  const SchedulerConfig& config_;
  ServingMetrics& metrics_;
  double new_token_ratio_;
};

}  // namespace rlm
