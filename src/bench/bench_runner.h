// Drives a benchmark run: warm-up, then the dataset's conversations dispatched on the arrival
// schedule to a pool of worker threads (one blocking HTTP request in flight per worker).
//
// - --max-concurrency N: N workers, so at most N requests are in flight; a request that arrives
//   while all are busy waits in a FIFO queue and its timing starts when it is actually sent
//   (as SGLang's semaphore). Without it a new worker starts whenever a request arrives and none
//   is free, so every request is sent at its arrival time.
// - Multi-turn: a conversation runs on one worker; turn k is sent as soon as turn k-1's answer
//   has arrived, carrying the history (chat: alternating user/assistant messages; completions /
//   sglang: the concatenated text of earlier prompts and answers).
// - Warm-up requests (the first turns of the first conversations, sent at once) run before the
//   clock starts and are excluded from the metrics; if all of them fail the run stops with the
//   first error.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "bench/dataset.h"
#include "bench/metrics.h"
#include "bench/request_client.h"
#include "core/status.h"

namespace rlm::bench {

struct RunOptions {
  Endpoint endpoint;
  RequestOptions request;
  double request_rate = INFINITY;
  double burstiness = 1.0;
  int64_t max_concurrency = 0;  // 0: unbounded
  int64_t warmup_requests = 1;
  uint64_t seed = 1;
  bool progress = false;        // print "completed i/n" lines on stderr
};

struct RunResult {
  std::vector<RequestOutcome> outcomes;  // all turns, ordered by (conversation, turn)
  double duration_s = 0.0;
};

// The request for `turn` of `conv` given the answers of the earlier turns.
RequestSpec make_turn_request(const Conversation& conv, size_t turn,
                              const std::vector<std::string>& answers, Backend backend);

// Sends every request and waits for all of them. `send` defaults to send_request (tests may
// substitute their own).
using SendFn = std::function<RequestOutcome(const RequestSpec&)>;
StatusOr<RunResult> run_benchmark(const std::vector<Conversation>& dataset,
                                  const RunOptions& options, SendFn send = nullptr);

}  // namespace rlm::bench
