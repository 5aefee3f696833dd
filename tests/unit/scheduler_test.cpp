// Scheduler tests with a fake model whose "next token" is a hash of the whole sequence as read
// back from the KV cache through req_to_token: any slot mix-up, premature free or wrong prefix
// share changes the output or trips a position check. Deterministic, CPU only.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <random>

#include "scheduler_test_util.h"

namespace rlm {
namespace {

using namespace testing;

struct Params {
  int64_t page_size;
  std::string cache;
  std::string policy;
  bool overlap = false;
};

class SchedulerMatrix : public ::testing::TestWithParam<Params> {};

// Random prompts, many sharing prefixes, in a pool that forces eviction and retraction.
TEST_P(SchedulerMatrix, OutputsEqualReferenceAndEverythingIsFreed) {
  const Params p = GetParam();
  const uint32_t seed = std::getenv("RADIXLM_TEST_SEED") ? std::stoul(std::getenv("RADIXLM_TEST_SEED"))
                                                        : std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t num_pages = 112 / p.page_size + 1;  // one request of up to 100 tokens always fits
  FakeExecutor exec(num_pages, p.page_size, 16, 128, -1, p.overlap);
  SchedulerConfig cfg;
  cfg.overlap_schedule = p.overlap;
  cfg.cache = parse_cache_kind(p.cache).value();
  cfg.policy = parse_schedule_policy(p.policy).value();
  cfg.chunked_prefill_size = 24;
  cfg.max_prefill_tokens = 48;
  cfg.max_running_requests = 8;
  cfg.init_new_token_ratio = 0.0;  // reserve nothing for decodes: admission over-commits, decode retracts
  cfg.min_new_token_ratio = 0.0;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, letters(), metrics);
  std::vector<std::vector<int32_t>> prefixes = {random_ids(rng, 30), random_ids(rng, 7)};
  std::vector<std::shared_ptr<Req>> reqs;
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> prompt;
    if (i % 3 != 0) prompt = prefixes[i % 2];
    auto tail = random_ids(rng, 1 + rng() % 40);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    reqs.push_back(make_req("r" + std::to_string(i), prompt, 1 + rng() % 30));
    ASSERT_TRUE(s.submit(reqs.back()).is_ok());
    if (i % 7 == 0) s.step();  // arrivals interleave with steps
  }
  run_to_completion(s);
  for (auto& r : reqs) {
    Collected c = drain(*r->stream);
    ASSERT_TRUE(c.finish.has_value()) << r->rid;
    EXPECT_EQ(c.finish->reason, "length") << r->rid;
    EXPECT_EQ(c.tokens, reference(r->prompt_ids, r->params.max_new_tokens)) << r->rid;
    EXPECT_EQ(c.finish->completion_tokens, r->params.max_new_tokens);
    if (p.cache == "naive") {
      EXPECT_EQ(c.finish->cached_tokens, 0);
    }
  }
  ASSERT_TRUE(s.check_integrity().is_ok());
  if (p.cache == "radix") {
    EXPECT_GT(metrics->cached_tokens(), 0) << "shared prefixes were never reused";
  }
  EXPECT_GT(metrics->retractions(), 0) << "the pool was meant to be tight enough to force retraction";
  if (p.overlap) {
    // The random phase may never reach steady decoding (arrivals, a tight pool); two requests alone
    // must overlap.
    std::vector<std::shared_ptr<Req>> tail_reqs = {make_req("tail0", random_ids(rng, 5), 12),
                                                   make_req("tail1", random_ids(rng, 9), 12)};
    for (auto& r : tail_reqs) ASSERT_TRUE(s.submit(r).is_ok());
    run_to_completion(s);
    for (auto& r : tail_reqs) EXPECT_EQ(drain(*r->stream).tokens, reference(r->prompt_ids, 12)) << r->rid;
    EXPECT_GT(exec.future_tokens, 0) << "no step was launched ahead of its predecessor's results";
  } else {
    EXPECT_EQ(exec.launched_steps, 0);
  }
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), num_pages) << "KV pages leaked";
  EXPECT_EQ(exec.req_to_token().num_free(), exec.req_to_token().max_requests());
}

INSTANTIATE_TEST_SUITE_P(All, SchedulerMatrix,
                         ::testing::Values(Params{1, "radix", "fcfs"}, Params{1, "radix", "lpm"},
                                           Params{4, "radix", "fcfs"}, Params{16, "radix", "lpm"},
                                           Params{1, "naive", "fcfs"}, Params{16, "naive", "fcfs"},
                                           Params{1, "radix", "fcfs", true}, Params{4, "radix", "lpm", true},
                                           Params{16, "radix", "fcfs", true}, Params{1, "naive", "fcfs", true}),
                         [](const auto& info) {
                           return info.param.cache + "_" + info.param.policy + "_page" +
                                  std::to_string(info.param.page_size) + (info.param.overlap ? "_overlap" : "");
                         });

TEST(Scheduler, SharedPrefixIsReusedAndReported) {
  FakeExecutor exec(64, 4, 8, 128);
  SchedulerConfig cfg;
  Scheduler s(exec, cfg, letters());
  std::mt19937 rng(3);
  const std::vector<int32_t> system = random_ids(rng, 40);
  auto first = make_req("a", system, 4);
  first->prompt_ids.push_back(5);
  ASSERT_TRUE(s.submit(first).is_ok());
  run_to_completion(s);
  const int64_t before = exec.extend_tokens;
  auto second = make_req("b", system, 4);
  second->prompt_ids.push_back(9);
  ASSERT_TRUE(s.submit(second).is_ok());
  run_to_completion(s);
  Collected c = drain(*second->stream);
  ASSERT_TRUE(c.finish.has_value());
  EXPECT_EQ(c.finish->cached_tokens, 40);  // the 40-token system prompt, page aligned
  EXPECT_EQ(exec.extend_tokens - before, 1);  // only the new last token was prefilled
  EXPECT_EQ(c.tokens, reference(second->prompt_ids, 4));
}

TEST(Scheduler, LongPromptIsPrefilledInChunks) {
  FakeExecutor exec(64, 1, 4, 128);
  SchedulerConfig cfg;
  cfg.chunked_prefill_size = 16;
  Scheduler s(exec, cfg, letters());
  std::mt19937 rng(5);
  auto r = make_req("long", random_ids(rng, 50), 3);
  ASSERT_TRUE(s.submit(r).is_ok());
  run_to_completion(s);
  EXPECT_EQ(exec.chunk_items, 3);  // 16 + 16 + 16 + 2
  EXPECT_EQ(drain(*r->stream).tokens, reference(r->prompt_ids, 3));
}

TEST(Scheduler, TinyPoolRetractsAndRecomputes) {
  // Room for one long request at a time: concurrent decodes must be retracted, not crash.
  FakeExecutor exec(40, 1, 8, 64);
  SchedulerConfig cfg;
  cfg.cache = CacheKind::kNaive;
  cfg.init_new_token_ratio = 0.0;  // admit greedily so decode runs out of room
  cfg.min_new_token_ratio = 0.0;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, letters(), metrics);
  std::mt19937 rng(9);
  std::vector<std::shared_ptr<Req>> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(make_req("t" + std::to_string(i), random_ids(rng, 6), 20));
    ASSERT_TRUE(s.submit(reqs.back()).is_ok());
  }
  run_to_completion(s);
  for (auto& r : reqs) EXPECT_EQ(drain(*r->stream).tokens, reference(r->prompt_ids, 20)) << r->rid;
  EXPECT_GT(metrics->retractions(), 0);
  EXPECT_EQ(s.num_free_pages(), 40);
}

TEST(Scheduler, AbortAtEveryStage) {
  FakeExecutor exec(64, 1, 4, 128);
  SchedulerConfig cfg;
  cfg.chunked_prefill_size = 8;
  Scheduler s(exec, cfg, letters());
  std::mt19937 rng(11);
  auto queued = make_req("queued", random_ids(rng, 5), 10);
  auto chunked = make_req("chunked", random_ids(rng, 30), 10);
  auto running = make_req("running", random_ids(rng, 4), 50);
  ASSERT_TRUE(s.submit(queued).is_ok());
  s.abort("queued");  // before any step
  ASSERT_TRUE(s.submit(chunked).is_ok());
  s.step();  // first chunk of 8
  s.abort("chunked");
  s.step();
  ASSERT_TRUE(s.submit(running).is_ok());
  for (int i = 0; i < 5; ++i) s.step();
  s.abort("running");
  s.abort("no-such-request");
  run_to_completion(s);
  for (auto& r : {queued, chunked, running}) {
    Collected c = drain(*r->stream);
    ASSERT_TRUE(c.finish.has_value()) << r->rid;
    EXPECT_EQ(c.finish->reason, "abort") << r->rid;
  }
  EXPECT_FALSE(drain(*running->stream).finish.has_value());
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), 64);
  EXPECT_EQ(exec.req_to_token().num_free(), 4);
}

// abort(id) matches a rid or a parent id exactly: ids that merely start with it are untouched.
TEST(Scheduler, AbortMatchesExactIdsOrParentOnly) {
  FakeExecutor exec(256, 1, 8, 128);
  Scheduler s(exec, SchedulerConfig{}, letters());
  std::mt19937 rng(5);
  auto a = make_req("chatcmpl", random_ids(rng, 4), 30);
  auto b = make_req("chatcmpl-1f", random_ids(rng, 4), 30);   // starts with "chatcmpl-"
  auto c0 = make_req("job-0", random_ids(rng, 4), 30);
  auto c1 = make_req("job-1", random_ids(rng, 4), 30);
  c0->parent_rid = c1->parent_rid = "job";
  auto d = make_req("job-10", random_ids(rng, 4), 30);         // another request, no parent
  for (auto& r : {a, b, c0, c1, d}) ASSERT_TRUE(s.submit(r).is_ok());
  for (int i = 0; i < 3; ++i) s.step();
  s.abort("chatcmpl");
  s.abort("job");
  s.abort("job-1");  // already aborted through its parent: no effect
  s.abort("chat");
  run_to_completion(s);
  for (auto& r : {a, c0, c1}) EXPECT_EQ(drain(*r->stream).finish->reason, "abort") << r->rid;
  for (auto& r : {b, d}) {
    Collected c = drain(*r->stream);
    EXPECT_EQ(c.finish->reason, "length") << r->rid;
    EXPECT_EQ(c.tokens.size(), 30u) << r->rid;
  }
}

// The HTTP server's way of waiting: a listener told of every push, events taken with try_pop.
TEST(RequestStream, ListenerSeesEveryPushAndEventsAlreadyWaiting) {
  RequestStream s;
  s.push(StreamEvent{"a", {1}, {}, std::nullopt});
  int calls = 0;
  s.set_listener([&] { ++calls; });
  EXPECT_EQ(calls, 1);  // an event was waiting
  s.push(StreamEvent{"b", {2}, {}, std::nullopt});
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s.try_pop()->text, "a");
  EXPECT_EQ(s.try_pop()->text, "b");
  EXPECT_FALSE(s.try_pop().has_value());
  s.set_listener(nullptr);
  s.push(StreamEvent{"c", {3}, {}, std::nullopt});
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s.pop(std::chrono::milliseconds(0))->text, "c");
}

TEST(Scheduler, StopStringsAcrossTokensAreNotLeaked) {
  FakeExecutor exec(64, 1, 4, 128);
  Scheduler s(exec, SchedulerConfig{}, letters());
  std::mt19937 rng(13);
  auto r = make_req("s", random_ids(rng, 5), 40);
  // Pick a stop string from the reference continuation so it spans tokens 10..12.
  std::vector<int32_t> ref = reference(r->prompt_ids, 40);
  std::string text;
  for (int32_t t : ref) text += static_cast<char>('a' + t % 26);
  const std::string stop = text.substr(10, 3);
  r->params.stop = {stop};
  ASSERT_TRUE(s.submit(r).is_ok());
  run_to_completion(s);
  Collected c = drain(*r->stream);
  ASSERT_TRUE(c.finish.has_value());
  EXPECT_EQ(c.finish->reason, "stop");
  EXPECT_EQ(c.finish->matched_stop_str.value_or(""), stop);
  EXPECT_EQ(c.text, text.substr(0, text.find(stop)));
}

class SchedulerOverlap : public ::testing::TestWithParam<bool> {};

// EOS and stop ids end requests at the same token with overlap on (a step already launched for a
// finished request is dropped) and off.
TEST_P(SchedulerOverlap, EosAndStopTokenIds) {
  std::mt19937 rng(17);
  auto prompt = random_ids(rng, 6);
  std::vector<int32_t> ref = reference(prompt, 30);
  const int32_t eos = ref[7];
  FakeExecutor exec(64, 1, 4, 128, eos, GetParam());
  SchedulerConfig cfg;
  cfg.overlap_schedule = GetParam();
  Scheduler s(exec, cfg, letters());
  auto a = make_req("eos", prompt, 30);
  auto b = make_req("ignore", prompt, 30);
  b->params.ignore_eos = true;
  auto c = make_req("stopid", prompt, 30);
  c->params.ignore_eos = true;
  c->params.stop_token_ids = {ref[3]};
  for (auto& r : {a, b, c}) ASSERT_TRUE(s.submit(r).is_ok());
  run_to_completion(s);
  Collected ca = drain(*a->stream), cb = drain(*b->stream), cc = drain(*c->stream);
  const auto first_eos = std::find(ref.begin(), ref.end(), eos) - ref.begin();
  EXPECT_EQ(ca.finish->reason, "stop");
  EXPECT_EQ(static_cast<int64_t>(ca.tokens.size()), first_eos + 1);
  EXPECT_EQ(cb.finish->reason, "length");
  EXPECT_EQ(cb.tokens, ref);
  EXPECT_EQ(cc.finish->reason, "stop");
  EXPECT_EQ(cc.tokens.back(), ref[3]);
  EXPECT_EQ(exec.future_tokens > 0, GetParam());
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), 64);
  EXPECT_EQ(exec.req_to_token().num_free(), 4);
}

// Aborts arriving while a step is in flight; requests with penalties and logprobs keep overlapping.
TEST_P(SchedulerOverlap, AbortsAndPenaltyRequests) {
  std::mt19937 rng(23);
  FakeExecutor exec(256, 4, 8, 128, -1, GetParam());
  SchedulerConfig cfg;
  cfg.overlap_schedule = GetParam();
  Scheduler s(exec, cfg, letters());
  std::vector<std::shared_ptr<Req>> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(make_req("o" + std::to_string(i), random_ids(rng, 5 + i), 40));
    ASSERT_TRUE(s.submit(reqs.back()).is_ok());
  }
  for (int i = 0; i < 10; ++i) s.step();
  s.abort("o1");
  s.abort("o4");
  for (int i = 0; i < 5; ++i) s.step();
  auto late = make_req("late", random_ids(rng, 9), 12);
  late->params.presence_penalty = 0.5f;  // sampled on the device: overlap goes on while it runs
  late->params.logprobs = 2;
  ASSERT_TRUE(s.submit(late).is_ok());
  const int64_t sequential_before = s.metrics().sequential_decode_steps();
  run_to_completion(s);
  if (GetParam()) {
    EXPECT_GT(exec.launched_penalty_items, 0) << "the penalty request never ran in a launched step";
    EXPECT_EQ(s.metrics().sequential_decode_steps(), sequential_before) << "overlap paused";
    EXPECT_GT(s.metrics().overlapped_decode_steps(), 0);
  } else {
    EXPECT_EQ(exec.launched_penalty_items, 0);
    EXPECT_EQ(s.metrics().overlapped_decode_steps(), 0);
  }
  for (auto& r : reqs) {
    Collected c = drain(*r->stream);
    ASSERT_TRUE(c.finish.has_value()) << r->rid;
    const auto ref = reference(r->prompt_ids, 40);
    if (r->rid == "o1" || r->rid == "o4") {
      EXPECT_EQ(c.finish->reason, "abort");
      EXPECT_LT(c.tokens.size(), ref.size());
      EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), ref.begin())) << r->rid;
    } else {
      EXPECT_EQ(c.tokens, ref) << r->rid;
    }
  }
  EXPECT_EQ(drain(*late->stream).tokens, reference(late->prompt_ids, 12));
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), 256);
  EXPECT_EQ(exec.req_to_token().num_free(), 8);
}

INSTANTIATE_TEST_SUITE_P(OnOff, SchedulerOverlap, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "overlap" : "sequential"; });

TEST(Scheduler, RejectsWhatCanNeverRunAndLimitsTheQueue) {
  FakeExecutor exec(8, 4, 2, 64);
  SchedulerConfig cfg;
  cfg.max_queued_requests = 2;
  Scheduler s(exec, cfg, letters());
  EXPECT_EQ(s.submit(make_req("big", std::vector<int32_t>(30, 1), 10)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.submit(make_req("ctx", std::vector<int32_t>(10, 1), 60)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.submit(make_req("empty", {}, 5)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.submit(make_req("oov", {1, static_cast<int32_t>(kVocab)}, 5)).code(), StatusCode::kInvalidArgument);
  auto bad = make_req("temp", {1, 2}, 5);
  bad->params.temperature = -1.0f;
  EXPECT_EQ(s.submit(bad).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(s.submit(make_req("q1", {1, 2}, 2)).is_ok());
  EXPECT_EQ(s.submit(make_req("q1", {1, 2}, 2)).code(), StatusCode::kInvalidArgument);  // duplicate id
  ASSERT_TRUE(s.submit(make_req("q2", {1, 2}, 2)).is_ok());
  EXPECT_EQ(s.submit(make_req("q3", {1, 2}, 2)).code(), StatusCode::kUnavailable);
  run_to_completion(s);
  EXPECT_TRUE(s.submit(make_req("q3", {1, 2}, 2)).is_ok());  // room again
  run_to_completion(s);
}

TEST(Scheduler, SiblingsShareThePromptKV) {
  FakeExecutor exec(128, 1, 8, 128);
  Scheduler s(exec, SchedulerConfig{}, letters());
  std::mt19937 rng(19);
  auto prompt = random_ids(rng, 33);
  std::vector<std::shared_ptr<Req>> sibs;
  for (int i = 0; i < 4; ++i) {
    sibs.push_back(make_req("n" + std::to_string(i), prompt, 5));
    sibs.back()->group = "g";
    ASSERT_TRUE(s.submit(sibs.back()).is_ok());
  }
  run_to_completion(s);
  EXPECT_EQ(exec.extend_tokens, 33 + 3);  // one full prefill, then one token per sibling
  for (size_t i = 1; i < sibs.size(); ++i) EXPECT_EQ(drain(*sibs[i]->stream).finish->cached_tokens, 32);
}

TEST(Scheduler, ThreadedServingDrainsOnStop) {
  FakeExecutor exec(64, 1, 8, 128);
  auto s = std::make_unique<Scheduler>(exec, SchedulerConfig{}, letters());
  s->start();
  std::mt19937 rng(23);
  std::vector<std::shared_ptr<Req>> reqs;
  for (int i = 0; i < 10; ++i) {
    reqs.push_back(make_req("x" + std::to_string(i), random_ids(rng, 5), 8));
    ASSERT_TRUE(s->submit(reqs.back()).is_ok());
  }
  s->stop(/*drain=*/true);
  for (auto& r : reqs) {
    Collected c = drain(*r->stream);
    ASSERT_TRUE(c.finish.has_value());
    EXPECT_EQ(c.tokens, reference(r->prompt_ids, 8));
  }
  EXPECT_EQ(s->submit(make_req("late", {1}, 1)).code(), StatusCode::kUnavailable);
}

// Output processor alone: random texts, random stop sets; the emitted text is the reference cut.
TEST(OutputProcessor, StopStringsMatchReferenceOnRandomText) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> toks(1 + rng() % 30);
    for (auto& t : toks) t = static_cast<int32_t>(rng() % 4);  // letters a..d: many partial matches
    std::vector<std::string> stops;
    for (int k = 0, n = 1 + rng() % 3; k < n; ++k) {
      std::string st;
      for (int j = 0, m = 1 + rng() % 4; j < m; ++j) st += static_cast<char>('a' + rng() % 4);
      stops.push_back(st);
    }
    OutputProcessor op(std::make_unique<LetterDecoder>(), stops);
    std::string emitted, prefix, expected;
    bool stopped = false;
    for (int32_t t : toks) {
      prefix += static_cast<char>('a' + t);
      auto r = op.push(t);
      emitted += r.text;
      // Reference: at the first token boundary where a stop occurs, cut at the earliest one.
      size_t cut = std::string::npos;
      for (const auto& st : stops) cut = std::min(cut, prefix.find(st));
      if (cut != std::string::npos) {
        expected = prefix.substr(0, cut);
        ASSERT_TRUE(r.matched_stop.has_value());
        stopped = true;
        break;
      }
      ASSERT_FALSE(r.matched_stop.has_value());
    }
    if (!stopped) {
      emitted += op.flush();
      expected = prefix;
    }
    ASSERT_EQ(emitted, expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace rlm
