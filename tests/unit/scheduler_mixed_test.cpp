// Mixed steps and overlap with prefill, on the fake model of scheduler_test_util.h: a running stream
// gets one token per step while a long prompt is prefilled in chunks beside it (and stalls with
// mixed steps off), outputs are the same with mixed steps on and off (with and without overlap),
// and with overlap every step — prompt chunks included — is launched ahead of its predecessor's
// results. Deterministic, CPU only.
#include <gtest/gtest.h>

#include <random>

#include "scheduler/scheduler.h"
#include "scheduler_test_util.h"

namespace rlm {
namespace {

using namespace testing;

struct Mode {
  bool mixed;
  bool overlap;
};

std::string mode_name(const Mode& m) {
  return std::string(m.mixed ? "mixed" : "prefill_first") + (m.overlap ? "_overlap" : "_sequential");
}

class MixedSteps : public ::testing::TestWithParam<Mode> {};

// A stream decodes while an 8k-token prompt arrives and is prefilled in 512-token chunks: with
// mixed steps every step gives the stream its next token; prefill-first stalls it for every chunk.
TEST_P(MixedSteps, StreamGetsATokenEveryStepWhileALongPromptIsChunked) {
  const Mode m = GetParam();
  constexpr int64_t kLong = 8192, kChunk = 512;
  FakeExecutor exec(kLong + 1024, 1, 4, kLong + 256, -1, m.overlap);
  SchedulerConfig cfg;
  cfg.enable_mixed_chunk = m.mixed;
  cfg.overlap_schedule = m.overlap;
  cfg.chunked_prefill_size = kChunk;
  cfg.max_prefill_tokens = kChunk;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, letters(), metrics);
  std::mt19937 rng(29);
  auto stream = make_req("stream", random_ids(rng, 7), 200);
  ASSERT_TRUE(s.submit(stream).is_ok());
  std::vector<int32_t> got;
  while (got.size() < 3) {  // decoding steadily
    ASSERT_TRUE(s.step());
    const std::vector<int32_t> t = drain(*stream->stream).tokens;
    got.insert(got.end(), t.begin(), t.end());
  }
  auto long_req = make_req("long", random_ids(rng, kLong), 4);
  ASSERT_TRUE(s.submit(long_req).is_ok());
  const int64_t chunks_before = exec.chunk_items;
  int64_t steps = 0, max_gap = 0, gap = 0;
  std::vector<int32_t> long_tokens;
  while (long_tokens.empty()) {  // until the long prompt's first token arrives
    ASSERT_TRUE(s.step());
    ASSERT_TRUE(s.check_integrity().is_ok());
    ++steps;
    const std::vector<int32_t> t = drain(*stream->stream).tokens;
    got.insert(got.end(), t.begin(), t.end());
    gap = t.empty() ? gap + 1 : 0;
    max_gap = std::max(max_gap, gap);
    if (m.mixed) {
      EXPECT_EQ(t.size(), 1u) << "step " << steps << ": the stream waited for a prompt chunk";
    }
    const Collected c = drain(*long_req->stream);
    long_tokens.insert(long_tokens.end(), c.tokens.begin(), c.tokens.end());
    ASSERT_LT(steps, 1000);
  }
  const int64_t chunks = exec.chunk_items - chunks_before;
  EXPECT_GE(chunks, kLong / kChunk - 1) << "the prompt was meant to take many chunks";
  if (m.mixed) {
    EXPECT_EQ(max_gap, 0);
    EXPECT_GT(metrics->mixed_steps(), chunks) << "chunks ran without the stream's decode token";
  } else {
    EXPECT_GE(max_gap, chunks) << "prefill-first is expected to stall the stream for every chunk";
    EXPECT_EQ(metrics->mixed_steps(), 0);
  }
  run_to_completion(s);
  const Collected rest = drain(*stream->stream);
  got.insert(got.end(), rest.tokens.begin(), rest.tokens.end());
  EXPECT_EQ(got, reference(stream->prompt_ids, 200));
  const Collected long_rest = drain(*long_req->stream);
  long_tokens.insert(long_tokens.end(), long_rest.tokens.begin(), long_rest.tokens.end());
  EXPECT_EQ(long_tokens, reference(long_req->prompt_ids, 4));
  if (m.overlap) {
    EXPECT_EQ(metrics->sequential_decode_steps(), 0) << "overlap paused";
    EXPECT_GT(exec.launched_prefill_items, chunks) << "prompt chunks were not launched ahead";
  }
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), exec.num_pages());
}

// Random arrivals with shared prefixes, n > 1 siblings, stop ids and aborts in a pool that forces
// retraction: the same tokens with mixed steps on and off, overlap on and off, all equal to the
// reference; everything returns.
TEST_P(MixedSteps, RandomWorkloadEqualsReference) {
  const Mode m = GetParam();
  const uint32_t seed = std::getenv("RADIXLM_TEST_SEED") ? std::stoul(std::getenv("RADIXLM_TEST_SEED"))
                                                        : std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t num_pages = 32;  // 128 tokens; one request needs at most 24 + 40 + 24
  FakeExecutor exec(num_pages, 4, 12, 160, -1, m.overlap);
  SchedulerConfig cfg;
  cfg.enable_mixed_chunk = m.mixed;
  cfg.overlap_schedule = m.overlap;
  cfg.chunked_prefill_size = 16;
  cfg.max_prefill_tokens = 24;
  cfg.max_running_requests = 8;
  cfg.init_new_token_ratio = 0.0;  // over-commit: decode retracts
  cfg.min_new_token_ratio = 0.0;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, letters(), metrics);
  const std::vector<int32_t> shared = random_ids(rng, 24);
  std::vector<std::shared_ptr<Req>> reqs;
  std::vector<std::string> aborted;
  for (int i = 0; i < 36; ++i) {
    std::vector<int32_t> prompt = i % 2 == 0 ? shared : std::vector<int32_t>{};
    const std::vector<int32_t> tail = random_ids(rng, 1 + rng() % 40);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    auto r = make_req("m" + std::to_string(i), prompt, 1 + rng() % 24);
    if (i % 9 == 4) r->group = "g" + std::to_string(i / 9);  // siblings below share the group
    if (i % 9 == 5) {
      r->group = "g" + std::to_string(i / 9);
      r->prompt_ids = reqs.back()->prompt_ids;
    }
    ASSERT_TRUE(s.submit(r).is_ok());
    reqs.push_back(r);
    for (int k = 0, n = static_cast<int>(rng() % 3); k < n; ++k) s.step();  // arrivals between steps
    if (i % 11 == 10) {
      aborted.push_back(reqs[i - 3]->rid);
      s.abort(aborted.back());
    }
  }
  run_to_completion(s);
  for (auto& r : reqs) {
    const Collected c = drain(*r->stream);
    ASSERT_TRUE(c.finish.has_value()) << r->rid;
    const std::vector<int32_t> ref = reference(r->prompt_ids, r->params.max_new_tokens);
    if (c.finish->reason == "abort") {
      EXPECT_NE(std::find(aborted.begin(), aborted.end(), r->rid), aborted.end()) << r->rid;
      EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), ref.begin())) << r->rid;
    } else {
      EXPECT_EQ(c.tokens, ref) << r->rid;
    }
  }
  EXPECT_GT(metrics->retractions(), 0) << "the pool was meant to force retraction";
  EXPECT_EQ(metrics->mixed_steps() > 0, m.mixed);
  EXPECT_EQ(exec.mixed_steps, metrics->mixed_steps());
  if (m.overlap) {
    EXPECT_GT(exec.launched_prefill_items, 0);
    EXPECT_GT(exec.future_tokens, 0);
  }
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), num_pages) << "KV pages leaked";
  EXPECT_EQ(exec.req_to_token().num_free(), exec.req_to_token().max_requests());
}

// The decode tokens count against max_prefill_tokens: a step never carries more new tokens.
TEST_P(MixedSteps, StepsStayWithinTheTokenBudget) {
  const Mode m = GetParam();
  FakeExecutor exec(2048, 1, 16, 256, -1, m.overlap);
  SchedulerConfig cfg;
  cfg.enable_mixed_chunk = m.mixed;
  cfg.overlap_schedule = m.overlap;
  cfg.chunked_prefill_size = 40;
  cfg.max_prefill_tokens = 50;
  cfg.max_running_requests = 12;
  Scheduler s(exec, cfg, letters());
  std::mt19937 rng(31);
  std::vector<std::shared_ptr<Req>> reqs;
  for (int i = 0; i < 16; ++i) {
    reqs.push_back(make_req("b" + std::to_string(i), random_ids(rng, 20 + 9 * i), 30));
    ASSERT_TRUE(s.submit(reqs.back()).is_ok());
    s.step();
  }
  run_to_completion(s);
  EXPECT_LE(exec.max_step_tokens, 50);
  EXPECT_GT(exec.max_step_tokens, 40) << "no step used the budget";
  for (auto& r : reqs) EXPECT_EQ(drain(*r->stream).tokens, reference(r->prompt_ids, 30)) << r->rid;
}

// --mixed-prefill-tokens: a step that carries decode tokens takes at most that many prompt tokens,
// while a step without decodes still fills max_prefill_tokens; outputs are unchanged.
TEST_P(MixedSteps, MixedPromptBudgetCapsStepsThatDecode) {
  const Mode m = GetParam();
  FakeExecutor exec(4096, 1, 16, 256, -1, m.overlap);
  SchedulerConfig cfg;
  cfg.enable_mixed_chunk = m.mixed;
  cfg.overlap_schedule = m.overlap;
  cfg.chunked_prefill_size = 64;
  cfg.max_prefill_tokens = 96;
  cfg.mixed_prefill_tokens = 24;
  cfg.max_running_requests = 12;
  Scheduler s(exec, cfg, letters());
  std::mt19937 rng(37);
  std::vector<std::shared_ptr<Req>> reqs;
  for (int i = 0; i < 12; ++i) {
    reqs.push_back(make_req("c" + std::to_string(i), random_ids(rng, 30 + 11 * i), 20));
    ASSERT_TRUE(s.submit(reqs.back()).is_ok());
    if (i % 3 == 2) s.step();
  }
  run_to_completion(s);
  if (m.mixed) {
    EXPECT_GT(exec.mixed_steps, 0);
    EXPECT_LE(exec.max_mixed_prompt_tokens, 24);
    EXPECT_EQ(exec.max_mixed_prompt_tokens, 24) << "no mixed step used its prompt budget";
  } else {
    EXPECT_EQ(exec.max_mixed_prompt_tokens, 0);  // prefill-first: prompt steps never decode
  }
  EXPECT_GT(exec.max_step_tokens, 64) << "a step without decodes took less than max_prefill_tokens allows";
  for (auto& r : reqs) EXPECT_EQ(drain(*r->stream).tokens, reference(r->prompt_ids, 20)) << r->rid;
}

INSTANTIATE_TEST_SUITE_P(Modes, MixedSteps,
                         ::testing::Values(Mode{true, false}, Mode{true, true}, Mode{false, false}, Mode{false, true}),
                         [](const auto& info) { return mode_name(info.param); });

}  // namespace
}  // namespace rlm
