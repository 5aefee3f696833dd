// Prompt logprobs (SamplingParams::prompt_logprobs) through the serving scheduler on the CPU with
// golden models: every prompt token's logprob and top alternatives equal the log-softmax (in
// double) of the logits transformers computed for the position before it (tests/golden, made by
// tools/make_golden.py), whether the prompt prefills in one step or in chunks, with or without
// overlap scheduling, beside requests that do not ask for them, and when the prompt is already
// in the prefix cache (such a request recomputes it: no cached tokens). The greedy outputs stay
// those of transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/model_loader.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_executor.h"
#include "unit/golden_test_util.h"

namespace rlm {
namespace {

constexpr double kLogprobTol = 3e-4;  // the golden logits match to 1e-4; a log-softmax adds at most twice that

struct Case {
  std::vector<int32_t> prompt, greedy;
  std::vector<float> logits;  // [prompt, vocab]
};

class SilentDecoder : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return ""; }
  std::string flush() override { return ""; }
};

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> prompt_logprobs;
  FinishInfo finish;
};

Collected collect(RequestStream& stream) {
  Collected c;
  bool seen_token = false;
  while (auto e = stream.pop(std::chrono::milliseconds(0))) {
    if (!e->prompt_logprobs.empty()) {
      EXPECT_FALSE(seen_token) << "prompt logprobs after the first output token";
    }
    seen_token = seen_token || !e->token_ids.empty();
    c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
    c.prompt_logprobs.insert(c.prompt_logprobs.end(), e->prompt_logprobs.begin(), e->prompt_logprobs.end());
    if (e->finish) c.finish = *e->finish;
  }
  return c;
}

// log_softmax in double of one golden logits row.
std::vector<double> reference_logprobs(const Case& c, size_t pos, int64_t vocab) {
  const float* row = c.logits.data() + pos * static_cast<size_t>(vocab);
  double mx = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  std::vector<double> out(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) out[v] = static_cast<double>(row[v]) - mx - std::log(sum);
  return out;
}

void expect_prompt_logprobs(const Case& c, const Collected& got, int32_t k, int64_t vocab, const std::string& what) {
  ASSERT_EQ(got.prompt_logprobs.size(), c.prompt.size() - 1) << what;
  for (size_t j = 1; j < c.prompt.size(); ++j) {
    const TokenLogprob& lp = got.prompt_logprobs[j - 1];
    const std::vector<double> ref = reference_logprobs(c, j - 1, vocab);
    EXPECT_EQ(lp.token, c.prompt[j]) << what << " position " << j;
    EXPECT_NEAR(lp.logprob, ref[c.prompt[j]], kLogprobTol) << what << " position " << j;
    ASSERT_EQ(lp.top.size(), static_cast<size_t>(k)) << what << " position " << j;
    // The alternatives: the reference's best values, in order (ids may swap only within a tie).
    std::vector<double> sorted = ref;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    for (int32_t q = 0; q < k; ++q) {
      EXPECT_NEAR(lp.top[q].second, sorted[q], kLogprobTol) << what << " position " << j << " rank " << q;
      EXPECT_NEAR(ref[lp.top[q].first], sorted[q], 2 * kLogprobTol) << what << " position " << j << " rank " << q;
    }
  }
}

struct Params {
  std::string model;
  bool overlap;
  int64_t chunk;  // chunked_prefill_size
};

class PromptLogprobsTest : public ::testing::TestWithParam<Params> {};

TEST_P(PromptLogprobsTest, MatchTransformersWithAndWithoutCache) {
  const Params& p = GetParam();
  const std::string dir = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/" + p.model;
  const nlohmann::json g = testing::read_json(dir + "/golden.json");
  std::vector<Case> cases;
  for (const auto& jc : g["cases"]) {
    Case c;
    c.prompt = jc["prompt_ids"].get<std::vector<int32_t>>();
    c.greedy = jc["greedy_ids"].get<std::vector<int32_t>>();
    if (c.prompt.size() < 5 || c.prompt.size() > 40) continue;  // a few, to keep the CPU test short
    const auto shape = jc["logits_shape"].get<std::vector<size_t>>();
    c.logits = testing::read_f32(dir + "/" + jc["logits_file"].get<std::string>(), shape[0] * shape[1]);
    cases.push_back(std::move(c));
  }
  ASSERT_GE(cases.size(), 2u);
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.max_requests = 8;
  rc.max_context_len = 128;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  const int64_t vocab = (*runner)->model_config().vocab_size;
  ModelStepExecutor exec(**runner);
  SchedulerConfig cfg;
  cfg.cache = CacheKind::kRadix;
  cfg.chunked_prefill_size = p.chunk;
  cfg.overlap_schedule = p.overlap;
  cfg.mamba_chunk_size = 4;  // hybrid models: snapshots every 4 tokens, so short prompts are cached too
  Scheduler s(exec, cfg, [](bool, const std::vector<int32_t>&) { return std::make_unique<SilentDecoder>(); });
  auto run = [&](const std::vector<std::pair<size_t, int32_t>>& reqs) {  // (case, prompt_logprobs)
    std::vector<std::shared_ptr<Req>> submitted;
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto r = std::make_shared<Req>();
      r->rid = "r" + std::to_string(i);
      r->prompt_ids = cases[reqs[i].first].prompt;
      r->params.temperature = 0.0f;
      r->params.max_new_tokens = 4;
      r->params.ignore_eos = true;
      r->params.prompt_logprobs = reqs[i].second;
      r->stream = std::make_shared<RequestStream>();
      EXPECT_TRUE(s.submit(r).is_ok());
      submitted.push_back(r);
    }
    for (int i = 0; i < 10000 && s.has_work(); ++i) {
      s.step();
      const Status st = s.check_integrity();
      EXPECT_TRUE(st.is_ok()) << st.to_string();
    }
    EXPECT_FALSE(s.has_work());
    std::vector<Collected> out;
    for (auto& r : submitted) out.push_back(collect(*r->stream));
    return out;
  };
  const std::vector<int32_t> greedy0(cases[0].greedy.begin(), cases[0].greedy.begin() + 4);
  const std::vector<int32_t> greedy1(cases[1].greedy.begin(), cases[1].greedy.begin() + 4);

  // Cold cache: one request with prompt logprobs beside one without, in the same steps.
  std::vector<Collected> cold = run({{0, 3}, {1, -1}});
  expect_prompt_logprobs(cases[0], cold[0], 3, vocab, "cold");
  EXPECT_TRUE(cold[1].prompt_logprobs.empty());
  EXPECT_EQ(cold[0].tokens, greedy0);
  EXPECT_EQ(cold[1].tokens, greedy1);

  // Both prompts are cached now: a request without prompt logprobs reuses its prefix, one with
  // them recomputes the prompt.
  std::vector<Collected> warm = run({{1, 0}, {0, -1}, {0, 5}});
  expect_prompt_logprobs(cases[1], warm[0], 0, vocab, "warm");
  expect_prompt_logprobs(cases[0], warm[2], 5, vocab, "warm, beside a cache hit");
  EXPECT_EQ(warm[0].finish.cached_tokens, 0);
  EXPECT_EQ(warm[2].finish.cached_tokens, 0);
  EXPECT_GT(warm[1].finish.cached_tokens, 0) << "the request without prompt logprobs should hit the cache";
  EXPECT_EQ(warm[0].tokens, greedy1);
  EXPECT_EQ(warm[1].tokens, greedy0);
  EXPECT_EQ(warm[2].tokens, greedy0);
  s.flush_cache();
  EXPECT_EQ(s.num_free_pages(), exec.num_pages());
}

INSTANTIATE_TEST_SUITE_P(Golden, PromptLogprobsTest,
                         ::testing::Values(Params{"llama_gqa1_hd64", true, 2048}, Params{"llama_gqa1_hd64", false, 7},
                                           Params{"qwen3_gqa2_hd128", true, 6},
                                           Params{"qwen3next_gqa2_int2_moe4top2", true, 8}),
                         [](const auto& info) {
                           return info.param.model + (info.param.overlap ? "_overlap" : "_sync") + "_chunk" +
                                  std::to_string(info.param.chunk);
                         });

}  // namespace
}  // namespace rlm
