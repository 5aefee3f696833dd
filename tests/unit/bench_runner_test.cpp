// The `bench serve` driver with a fake sender: concurrency bound, warm-up, arrival schedule,
// multi-turn history and failure propagation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "bench/bench_runner.h"
#include "bench/schedule.h"

namespace rlm::bench {
namespace {

std::vector<Conversation> small_dataset(DatasetKind kind, int64_t n, int64_t turns = 1) {
  DatasetOptions o;
  o.kind = kind;
  o.format = kind == DatasetKind::kMultiTurn ? PromptFormat::kText : PromptFormat::kTokenIds;
  o.num_prompts = n;
  o.multi_turn_num_turns = turns;
  o.random_input_len = 6;
  o.random_output_len = 4;
  o.random_range_ratio = 1.0;
  return build_dataset(o).value();
}

RequestOutcome ok_outcome(const RequestSpec& spec, std::string text) {
  RequestOutcome o;
  o.success = true;
  o.planned_input_len = o.input_len = spec.planned_input_len;
  o.output_len = spec.max_tokens;
  o.max_tokens = spec.max_tokens;
  o.ttft_s = 0.001;
  o.latency_s = 0.002;
  o.generated_text = std::move(text);
  return o;
}

TEST(BenchRunner, MaxConcurrencyBoundsInFlightRequests) {
  auto ds = small_dataset(DatasetKind::kRandom, 24);
  for (int64_t limit : {1, 3, 8}) {
    std::atomic<int> in_flight{0}, peak{0}, calls{0};
    RunOptions o;
    o.max_concurrency = limit;
    o.warmup_requests = 2;
    auto r = run_benchmark(ds, o, [&](const RequestSpec& spec) {
      ++calls;
      int now = ++in_flight;
      int p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      --in_flight;
      return ok_outcome(spec, "x");
    });
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(calls.load(), 24 + 2);
    EXPECT_EQ(r->outcomes.size(), 24u);
    EXPECT_LE(peak.load(), std::max<int64_t>(limit, 2));  // the 2 warm-ups run before, together
    for (size_t i = 0; i < 24; ++i) {
      EXPECT_TRUE(r->outcomes[i].success);
      EXPECT_EQ(r->outcomes[i].conversation, static_cast<int64_t>(i));
      EXPECT_EQ(r->outcomes[i].output_len, ds[i].turns[0].output_len);
    }
  }
}

TEST(BenchRunner, UnboundedSendsEverythingAtOnceAndReusesIdleWorkers) {
  auto ds = small_dataset(DatasetKind::kRandom, 16);
  std::atomic<int> in_flight{0}, peak{0};
  RunOptions o;
  o.warmup_requests = 0;
  auto slow = [&](const RequestSpec& spec) {
    int now = ++in_flight;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    --in_flight;
    return ok_outcome(spec, "x");
  };
  ASSERT_TRUE(run_benchmark(ds, o, slow).is_ok());
  EXPECT_EQ(peak.load(), 16);  // request rate inf, no concurrency limit: all in flight together

  // Spaced arrivals (mean gap 20 ms) of instant requests: idle workers are reused.
  o.request_rate = 50.0;
  std::mutex mu;
  std::set<std::thread::id> threads;
  auto fast = [&](const RequestSpec& spec) {
    std::lock_guard<std::mutex> lock(mu);
    threads.insert(std::this_thread::get_id());
    return ok_outcome(spec, "x");
  };
  auto r = run_benchmark(ds, o, fast);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->outcomes.size(), 16u);
  EXPECT_LT(threads.size(), 16u);
}

TEST(BenchRunner, RequestRateSpreadsArrivals) {
  auto ds = small_dataset(DatasetKind::kRandom, 20);
  RunOptions o;
  o.request_rate = 100.0;
  o.warmup_requests = 0;
  auto r = run_benchmark(ds, o, [&](const RequestSpec& spec) { return ok_outcome(spec, "x"); });
  ASSERT_TRUE(r.is_ok());
  auto arrivals = arrival_times(20, 100.0, 1.0, o.seed).value();
  EXPECT_GE(r->duration_s, arrivals.back());  // the last request cannot start before its arrival
}

TEST(BenchRunner, MultiTurnSendsHistory) {
  auto ds = small_dataset(DatasetKind::kMultiTurn, 3, 3);
  std::mutex mu;
  std::vector<RequestSpec> seen;
  RunOptions o;
  o.request.backend = Backend::kOpenAiChat;
  o.warmup_requests = 0;
  auto r = run_benchmark(ds, o, [&](const RequestSpec& spec) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(spec);
    return ok_outcome(spec, "answer" + std::to_string(spec.messages.size()));
  });
  ASSERT_TRUE(r.is_ok());
  ASSERT_EQ(r->outcomes.size(), 9u);
  ASSERT_EQ(seen.size(), 9u);
  for (const RequestSpec& spec : seen) {
    const size_t n = spec.messages.size();
    ASSERT_EQ(n % 2, 1u);
    const size_t turn = n / 2;
    for (size_t k = 0; k < turn; ++k) {
      EXPECT_EQ(spec.messages[2 * k].role, "user");
      EXPECT_EQ(spec.messages[2 * k + 1].role, "assistant");
      EXPECT_EQ(spec.messages[2 * k + 1].content, "answer" + std::to_string(2 * k + 1));
    }
  }
  for (size_t c = 0; c < 3; ++c) {
    for (size_t t = 0; t < 3; ++t) {
      const RequestOutcome& out = r->outcomes[c * 3 + t];
      EXPECT_EQ(out.conversation, static_cast<int64_t>(c));
      EXPECT_EQ(out.turn, static_cast<int64_t>(t));
      int64_t planned = 0;
      for (size_t k = 0; k < t; ++k) planned += ds[c].turns[k].prompt.len + ds[c].turns[k].output_len;
      EXPECT_EQ(out.planned_input_len, planned + ds[c].turns[t].prompt.len);
    }
  }
  // Completions-style text history: earlier prompts and answers concatenated in order.
  std::vector<std::string> answers = {"A0", "A1"};
  RequestSpec spec = make_turn_request(ds[0], 2, answers, Backend::kOpenAiCompletions);
  EXPECT_EQ(spec.prompt_text, ds[0].turns[0].prompt.text + "A0" + ds[0].turns[1].prompt.text + "A1" +
                                  ds[0].turns[2].prompt.text);
}

TEST(BenchRunner, FailedTurnFailsTheRestOfItsConversation) {
  auto ds = small_dataset(DatasetKind::kMultiTurn, 2, 3);
  RunOptions o;
  o.warmup_requests = 0;
  std::atomic<int> calls{0};
  auto r = run_benchmark(ds, o, [&](const RequestSpec& spec) {
    ++calls;
    RequestOutcome out = ok_outcome(spec, "ZQX");  // not in the (lower-case) word list
    if (spec.prompt_text.find("ZQX") != std::string::npos) {  // second turn: history has the answer
      out.success = false;
      out.error = "HTTP 500";
    }
    return out;
  });
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(calls.load(), 4);  // turns 0 and 1 of each conversation; turn 2 never sent
  for (size_t c = 0; c < 2; ++c) {
    EXPECT_TRUE(r->outcomes[c * 3].success);
    EXPECT_EQ(r->outcomes[c * 3 + 1].error, "HTTP 500");
    EXPECT_FALSE(r->outcomes[c * 3 + 2].success);
    EXPECT_NE(r->outcomes[c * 3 + 2].error.find("not sent"), std::string::npos);
  }
}

TEST(BenchRunner, AllWarmupsFailingStopsTheRun) {
  auto ds = small_dataset(DatasetKind::kRandom, 4);
  RunOptions o;
  o.warmup_requests = 2;
  auto r = run_benchmark(ds, o, [&](const RequestSpec&) {
    RequestOutcome out;
    out.error = "connection refused";
    return out;
  });
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("connection refused"), std::string::npos);
}

}  // namespace
}  // namespace rlm::bench
