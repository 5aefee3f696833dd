#include "bench/bench_runner.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "bench/schedule.h"

namespace rlm::bench {

namespace {

using Clock = std::chrono::steady_clock;

// FIFO of conversation indices released by the dispatcher to the workers.
class WorkQueue {
 public:
  // Returns true when more items are queued than workers wait for them (time for a new worker
  // if the pool may grow).
  bool push(size_t item) {
    bool short_of_workers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(item);
      short_of_workers = items_.size() > idle_;
    }
    cv_.notify_one();
    return short_of_workers;
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until an item is available (true) or the queue is closed and drained (false).
  bool pop(size_t& item) {
    std::unique_lock<std::mutex> lock(mu_);
    ++idle_;
    cv_.wait(lock, [&] { return closed_ || !items_.empty(); });
    --idle_;
    if (items_.empty()) return false;
    item = items_.front();
    items_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> items_;
  size_t idle_ = 0;  // workers blocked in pop()
  bool closed_ = false;
};

}  // namespace

RequestSpec make_turn_request(const Conversation& conv, size_t turn,
                              const std::vector<std::string>& answers, Backend backend) {
  RLM_CHECK_LT(turn, conv.turns.size());
  RLM_CHECK_GE(answers.size(), turn);
  RequestSpec spec;
  const Turn& t = conv.turns[turn];
  spec.max_tokens = t.output_len;
  spec.planned_input_len = 0;
  for (size_t k = 0; k < turn; ++k) {
    spec.planned_input_len += conv.turns[k].prompt.len + conv.turns[k].output_len;
  }
  spec.planned_input_len += t.prompt.len;
  if (backend == Backend::kOpenAiChat) {
    for (size_t k = 0; k < turn; ++k) {
      spec.messages.push_back({"user", conv.turns[k].prompt.text});
      spec.messages.push_back({"assistant", answers[k]});
    }
    spec.messages.push_back({"user", t.prompt.text});
    return spec;
  }
  if (!t.prompt.ids.empty()) {
    RLM_CHECK_EQ(turn, 0u) << "token-id prompts have no multi-turn history";
    spec.prompt_ids = t.prompt.ids;
    return spec;
  }
  for (size_t k = 0; k < turn; ++k) spec.prompt_text += conv.turns[k].prompt.text + answers[k];
  spec.prompt_text += t.prompt.text;
  return spec;
}

StatusOr<RunResult> run_benchmark(const std::vector<Conversation>& dataset,
                                  const RunOptions& options, SendFn send) {
  if (dataset.empty()) return invalid_argument("the dataset is empty");
  if (options.max_concurrency < 0) {
    return invalid_argument(str("--max-concurrency must be >= 1, got ", options.max_concurrency));
  }
  if (options.warmup_requests < 0) {
    return invalid_argument(str("--warmup-requests must be >= 0, got ", options.warmup_requests));
  }
  RLM_ASSIGN_OR_RETURN(std::vector<double> arrivals,
                       arrival_times(static_cast<int64_t>(dataset.size()), options.request_rate,
                                     options.burstiness, options.seed));
  Clock::time_point bench_start = Clock::now();
  if (!send) {
    send = [&](const RequestSpec& spec) {
      return send_request(options.endpoint, options.request, spec, bench_start);
    };
  }

  // Warm-up: all at once, excluded from the results.
  if (options.warmup_requests > 0) {
    std::vector<RequestOutcome> warm(static_cast<size_t>(options.warmup_requests));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < warm.size(); ++i) {
      threads.emplace_back([&, i] {
        warm[i] = send(make_turn_request(dataset[i % dataset.size()], 0, {}, options.request.backend));
      });
    }
    for (auto& t : threads) t.join();
    bool any_ok = false;
    for (const auto& o : warm) any_ok = any_ok || o.success;
    if (!any_ok) {
      return Status(StatusCode::kUnavailable,
                    str("all ", warm.size(), " warm-up requests failed; first error: ", warm[0].error));
    }
  }

  // Result slots: one per (conversation, turn), filled by the worker that runs it.
  std::vector<size_t> first_slot(dataset.size());
  size_t total = 0;
  for (size_t i = 0; i < dataset.size(); ++i) {
    first_slot[i] = total;
    total += dataset[i].turns.size();
  }
  RunResult result;
  result.outcomes.resize(total);
  std::mutex progress_mu;
  size_t done = 0;

  WorkQueue queue;
  auto worker = [&] {
    size_t c = 0;
    while (queue.pop(c)) {
      const Conversation& conv = dataset[c];
      std::vector<std::string> answers;
      for (size_t t = 0; t < conv.turns.size(); ++t) {
        RequestOutcome out = send(make_turn_request(conv, t, answers, options.request.backend));
        out.conversation = static_cast<int64_t>(c);
        out.turn = static_cast<int64_t>(t);
        answers.push_back(out.generated_text);
        const bool ok = out.success;
        result.outcomes[first_slot[c] + t] = std::move(out);
        if (options.progress) {
          std::lock_guard<std::mutex> lock(progress_mu);
          ++done;
          if (done == total || done % std::max<size_t>(1, total / 10) == 0) {
            std::fprintf(stderr, "bench: %zu/%zu requests done\n", done, total);
          }
        }
        if (!ok) {  // later turns depend on this answer: record them as failed too
          for (size_t k = t + 1; k < conv.turns.size(); ++k) {
            RequestOutcome& skipped = result.outcomes[first_slot[c] + k];
            skipped.conversation = static_cast<int64_t>(c);
            skipped.turn = static_cast<int64_t>(k);
            skipped.max_tokens = conv.turns[k].output_len;
            skipped.error = str("not sent: turn ", t, " of this conversation failed");
            skipped.error_kind = "not sent";
          }
          break;
        }
      }
    }
  };
  // Bounded: a fixed pool of max_concurrency workers. Unbounded: the pool grows whenever a
  // request arrives and no worker is free, so threads = the peak number in flight.
  const bool bounded = options.max_concurrency > 0;
  bench_start = Clock::now();
  std::vector<std::thread> workers;
  if (bounded) {
    const size_t n = std::min(dataset.size(), static_cast<size_t>(options.max_concurrency));
    for (size_t i = 0; i < n; ++i) workers.emplace_back(worker);
  }
  for (size_t i = 0; i < dataset.size(); ++i) {
    std::this_thread::sleep_until(bench_start + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(arrivals[i])));
    if (queue.push(i) && !bounded) workers.emplace_back(worker);
  }
  queue.close();
  for (auto& t : workers) t.join();
  result.duration_s = std::chrono::duration<double>(Clock::now() - bench_start).count();
  return result;
}

}  // namespace rlm::bench
