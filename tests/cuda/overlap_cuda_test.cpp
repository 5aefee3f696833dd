// Overlap scheduling on the GPU: the scheduler launches decode step N+1 (inputs read from step N's
// samples in device memory) before processing N. Greedy and seeded-sampled outputs must be the same
// with overlap on and off, and greedy ones equal the transformers goldens (f32-weight models).
// Requests with repetition/frequency/presence penalties and logprobs (computed on the device, the
// newest token of a launched step read from the runner's table) must also give the same tokens and
// bit-identical logprobs with overlap on and off, and must not pause overlap.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "scheduler/scheduler.h"

namespace rlm {
namespace {

std::string source_dir() {
  const char* env = std::getenv("RADIXLM_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : RADIXLM_SOURCE_DIR;
}

class NullDecoder : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return {}; }
  std::string flush() override { return {}; }
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;  // per request, from its stream
  int64_t free_pages = 0, total_pages = 0;
  int64_t overlapped_steps = 0, sequential_steps = 0;
};

// Two requests per golden case: greedy and seeded-sampled, or (with_penalties) the same with
// penalties and logprobs.
Outcome run(const std::string& dir, const nlohmann::json& g, bool overlap, bool with_penalties = false) {
  auto loaded = load_model(dir);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.device = Device::cuda(0);
  rc.attention_backend = "native";
  rc.page_size = 16;
  rc.max_requests = 8;
  rc.max_context_len = 192;
  rc.num_pages = 8 * 12;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  ModelStepExecutor exec(**runner);
  SchedulerConfig sc;
  sc.overlap_schedule = overlap;
  sc.max_running_requests = 8;
  Scheduler sched(exec, sc, [](bool, const std::vector<int32_t>&) { return std::make_unique<NullDecoder>(); });
  std::vector<std::shared_ptr<Req>> reqs;
  int i = 0;
  for (const auto& c : g["cases"]) {
    for (int sampled = 0; sampled < 2; ++sampled) {
      auto r = std::make_shared<Req>();
      r->rid = "r" + std::to_string(i++);
      r->prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
      r->params.max_new_tokens = 32;
      r->params.ignore_eos = true;
      if (sampled) {
        r->params.temperature = 0.8f;
        r->params.top_p = 0.9f;
        r->params.seed = 1234 + i;
      } else {
        r->params.temperature = 0.0f;
      }
      if (with_penalties && sampled) {
        r->params.frequency_penalty = 0.4f;
        r->params.presence_penalty = -0.3f;
        r->params.logprobs = 0;
      } else if (with_penalties) {
        r->params.repetition_penalty = 1.3f;
        r->params.frequency_penalty = 0.5f;
        r->params.presence_penalty = 0.2f;
        r->params.logprobs = 5;
      }
      r->stream = std::make_shared<RequestStream>();
      EXPECT_TRUE(sched.submit(r).is_ok());
      reqs.push_back(r);
    }
  }
  for (int s = 0; s < 100000 && sched.has_work(); ++s) sched.step();
  EXPECT_FALSE(sched.has_work());
  Outcome o;
  for (const auto& r : reqs) {
    o.tokens.push_back(r->output_ids);
    std::vector<TokenLogprob> lps;
    while (auto ev = r->stream->pop(std::chrono::milliseconds(0))) {
      lps.insert(lps.end(), ev->logprobs.begin(), ev->logprobs.end());
    }
    o.logprobs.push_back(std::move(lps));
  }
  o.overlapped_steps = sched.metrics().overlapped_decode_steps();
  o.sequential_steps = sched.metrics().sequential_decode_steps();
  sched.flush_cache();
  o.free_pages = sched.num_free_pages();
  o.total_pages = rc.num_pages;
  return o;
}

TEST(OverlapCuda, SameTokensOnAndOffAndGoldenGreedy) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"llama_gqa1_hd64", "qwen3_gqa2_hd128", "qwen2_gqa4_hd128"}) {
    SCOPED_TRACE(name);
    const std::string dir = source_dir() + "/tests/golden/" + name;
    std::ifstream gin(dir + "/golden.json");
    const nlohmann::json g = nlohmann::json::parse(gin);
    const Outcome on = run(dir, g, true);
    const Outcome off = run(dir, g, false);
    EXPECT_EQ(on.tokens, off.tokens);
    for (size_t c = 0; c < g["cases"].size(); ++c) {
      EXPECT_EQ(on.tokens[2 * c], g["cases"][c]["greedy_ids"].get<std::vector<int32_t>>()) << "case " << c;
      EXPECT_EQ(on.tokens[2 * c + 1].size(), 32u);
    }
    EXPECT_EQ(on.free_pages, on.total_pages);
    EXPECT_EQ(off.free_pages, off.total_pages);
  }
}

// Executor level, on the GPU (tests/unit/step_executor_test.cpp has the CPU twin and explains the
// numbers): after a prefill t0 and the history made [t0, t0], frequency 100 / presence -250 make
// decode 1 repeat t0 and force decode 2 away from it only if the token in flight (read by the
// device-side penalties from the runner's future-token table) is counted.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
};

Trace decode_three(const std::string& dir, bool overlap) {
  auto loaded = load_model(dir);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.device = Device::cuda(0);
  rc.attention_backend = "native";
  rc.page_size = 16;
  rc.max_requests = 2;
  rc.max_context_len = 64;
  rc.num_pages = 4;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  ModelStepExecutor exec(**runner);
  Req req;
  for (int i = 0; i < 9; ++i) req.prompt_ids.push_back((i * 11 + 3) % 23);
  req.params.temperature = 0.0f;
  req.params.logprobs = 3;
  const int32_t slot = (*runner)->req_to_token().alloc();
  const int32_t n = static_cast<int32_t>(req.prompt_ids.size());
  auto item_for = [&](int32_t prefix, std::vector<int32_t> ids, int32_t pending) {
    StepItem it;
    it.req = &req;
    it.entry.req_slot = slot;
    it.entry.prefix_len = prefix;
    for (size_t i = 0; i < ids.size(); ++i) it.entry.new_slots.push_back(prefix + static_cast<int32_t>(i));
    it.entry.new_ids = std::move(ids);
    it.pending_outputs = pending;
    return it;
  };
  Trace t;
  auto take = [&](const SampleResult& r) {
    t.tokens.push_back(r.token);
    t.logprobs.push_back(r.logprob.value_or(TokenLogprob{}));
    req.output_ids.push_back(r.token);
  };
  take(exec.run(ForwardMode::kExtend, {item_for(0, req.prompt_ids, 0)}).at(0));
  req.output_ids.push_back(t.tokens[0]);
  req.params.frequency_penalty = 100.0f;
  req.params.presence_penalty = -250.0f;
  if (overlap) {
    auto first = exec.launch(ForwardMode::kDecode, {item_for(n, {req.output_ids.back()}, 0)});
    auto second = exec.launch(ForwardMode::kDecode, {item_for(n + 1, {kFutureToken}, 1)});
    take(exec.wait(*first).at(0));
    take(exec.wait(*second).at(0));
  } else {
    take(exec.run(ForwardMode::kDecode, {item_for(n, {req.output_ids.back()}, 0)}).at(0));
    take(exec.run(ForwardMode::kDecode, {item_for(n + 1, {req.output_ids.back()}, 0)}).at(0));
  }
  return t;
}

TEST(OverlapCuda, LaunchedStepPenalisesTheTokenInFlight) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = source_dir() + "/tests/golden/llama_gqa1_hd64";
  const Trace seq = decode_three(dir, false);
  const Trace ovl = decode_three(dir, true);
  EXPECT_EQ(ovl.tokens, seq.tokens);
  for (const Trace* t : {&seq, &ovl}) {
    ASSERT_EQ(t->tokens.size(), 3u);
    EXPECT_EQ(t->tokens[1], t->tokens[0]) << "decode 1 should repeat t0 (count 2: +50)";
    EXPECT_NE(t->tokens[2], t->tokens[0]) << "decode 2 must count the token in flight (count 3: -50)";
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ovl.logprobs[i].token, seq.tokens[i]);
    EXPECT_EQ(ovl.logprobs[i].logprob, seq.logprobs[i].logprob) << "step " << i;
    EXPECT_EQ(ovl.logprobs[i].top, seq.logprobs[i].top) << "step " << i;
    EXPECT_EQ(ovl.logprobs[i].top.size(), 3u);
  }
}

TEST(OverlapCuda, PenaltiesAndLogprobsSameOnAndOffWithoutPausing) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"llama_gqa1_hd64", "qwen3_gqa2_hd128"}) {
    SCOPED_TRACE(name);
    const std::string dir = source_dir() + "/tests/golden/" + name;
    std::ifstream gin(dir + "/golden.json");
    const nlohmann::json g = nlohmann::json::parse(gin);
    const Outcome on = run(dir, g, true, /*with_penalties=*/true);
    const Outcome off = run(dir, g, false, /*with_penalties=*/true);
    EXPECT_EQ(on.tokens, off.tokens);
    ASSERT_EQ(on.logprobs.size(), off.logprobs.size());
    for (size_t r = 0; r < on.logprobs.size(); ++r) {
      SCOPED_TRACE("request " + std::to_string(r));
      const size_t want_top = r % 2 == 0 ? 5 : 0;
      ASSERT_EQ(on.logprobs[r].size(), on.tokens[r].size()) << "one logprob per token";
      ASSERT_EQ(off.logprobs[r].size(), on.logprobs[r].size());
      for (size_t t = 0; t < on.logprobs[r].size(); ++t) {
        const TokenLogprob& a = on.logprobs[r][t];
        const TokenLogprob& b = off.logprobs[r][t];
        EXPECT_EQ(a.token, on.tokens[r][t]);
        EXPECT_EQ(a.token, b.token) << "token " << t;
        EXPECT_EQ(a.logprob, b.logprob) << "token " << t;
        EXPECT_TRUE(a.logprob <= 0.0f) << "token " << t << ": " << a.logprob;
        EXPECT_EQ(a.top, b.top) << "token " << t;
        ASSERT_EQ(a.top.size(), want_top);
        for (size_t i = 1; i < a.top.size(); ++i) EXPECT_GE(a.top[i - 1].second, a.top[i].second);
      }
    }
    // The penalties must show: some greedy row differs from the plain greedy golden.
    bool differs = false;
    for (size_t c = 0; c < g["cases"].size(); ++c) {
      differs = differs || on.tokens[2 * c] != g["cases"][c]["greedy_ids"].get<std::vector<int32_t>>();
    }
    EXPECT_TRUE(differs) << "penalties changed no greedy token";
    EXPECT_GT(on.overlapped_steps, 0);
    EXPECT_EQ(on.sequential_steps, 0) << "overlap paused for penalties or logprobs";
    EXPECT_EQ(off.overlapped_steps, 0);
    EXPECT_EQ(on.free_pages, on.total_pages);
    EXPECT_EQ(off.free_pages, off.total_pages);
  }
}

}  // namespace
}  // namespace rlm
