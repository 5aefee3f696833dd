// ModelStepExecutor on the CPU with a tiny golden model: logprobs are those of the raw logits
// (before penalties and temperature), the sampled token is the argmax of the raw logits after a
// reference penalty pass (written here), and a step launched while the request's newest token is
// still in flight (pending_outputs = 1) counts that token in its penalties: tokens and logprobs
// equal those of the sequential run, bit for bit. With a grammar-constrained request the launched
// step is sampled by finish_launch() after the step before it was read, and then counts that token
// once (from the request's outputs), not again from the future-token table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/model_loader.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"
#include "ops/ops.h"
#include "scheduler/step_executor.h"

#include "unit/no_fp_contract.h"  // the references round like the kernels

namespace rlm {
namespace {

const std::string kModelDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/golden/llama_gqa1_hd64";

std::unique_ptr<ModelRunner> make_runner() {
  auto loaded = load_model(kModelDir);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  ModelRunnerConfig rc;
  rc.page_size = 1;
  rc.max_requests = 4;
  rc.max_context_len = 64;
  rc.num_pages = 64;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  return std::move(*runner);
}

std::vector<int32_t> iota_slots(int32_t begin, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// Raw logits of one prefill entry, f32 [vocab] on the CPU.
std::vector<float> raw_logits(ModelRunner& runner, const std::vector<int32_t>& prompt) {
  BatchEntry e;
  e.req_slot = runner.req_to_token().alloc();
  e.new_ids = prompt;
  e.new_slots = iota_slots(0, static_cast<int32_t>(prompt.size()));
  ForwardBatch b = runner.build_batch(ForwardMode::kExtend, {e});
  const Tensor logits = runner.forward(b).to(Device::cpu());
  runner.req_to_token().free(e.req_slot);
  return std::vector<float>(logits.data<float>(), logits.data<float>() + logits.numel());
}

// HF repetition penalty over prompt + output, then frequency * count + presence over the output.
void reference_penalties(std::vector<float>& x, const SamplingParams& p, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& output) {
  std::vector<bool> seen(x.size(), false);
  std::vector<int32_t> count(x.size(), 0);
  for (int32_t t : prompt) seen[t] = true;
  for (int32_t t : output) {
    seen[t] = true;
    ++count[t];
  }
  for (size_t t = 0; t < x.size(); ++t) {
    if (seen[t]) x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
    if (count[t] > 0) x[t] -= p.frequency_penalty * static_cast<float>(count[t]) + p.presence_penalty;
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(StepExecutor, LogprobsBeforePenaltiesAndPenalisedGreedyToken) {
  auto ref_runner = make_runner();
  auto runner = make_runner();
  const int64_t vocab = runner->model_config().vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 5) % std::min<int64_t>(vocab, 97)));
  const std::vector<float> raw = raw_logits(*ref_runner, prompt);
  ASSERT_EQ(static_cast<int64_t>(raw.size()), vocab);
  const int32_t raw_best = static_cast<int32_t>(std::max_element(raw.begin(), raw.end()) - raw.begin());

  Req req;
  req.prompt_ids = prompt;
  req.output_ids = {raw_best, raw_best, raw_best, prompt[1]};  // history: the raw favourite, penalised away
  req.params.temperature = 0.0f;
  req.params.repetition_penalty = 1.4f;
  req.params.frequency_penalty = 1.5f;
  req.params.presence_penalty = 0.5f;
  req.params.logprobs = 5;
  StepItem item;
  item.req = &req;
  item.entry.req_slot = runner->req_to_token().alloc();
  item.entry.new_ids = prompt;
  item.entry.new_slots = iota_slots(0, static_cast<int32_t>(prompt.size()));
  ModelStepExecutor exec(*runner);
  const std::vector<SampleResult> got = exec.run(ForwardMode::kExtend, {item});
  ASSERT_EQ(got.size(), 1u);

  std::vector<float> penalised = raw;
  reference_penalties(penalised, req.params, req.prompt_ids, req.output_ids);
  const int32_t want = static_cast<int32_t>(std::max_element(penalised.begin(), penalised.end()) - penalised.begin());
  EXPECT_EQ(got[0].token, want);
  EXPECT_NE(got[0].token, raw_best) << "the penalties did not move the greedy token";

  Tensor lp = Tensor::from_vector(raw, {1, vocab});
  ops::log_softmax(lp);
  const float* l = lp.data<float>();
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [l](int32_t a, int32_t b) { return l[a] > l[b]; });
  ASSERT_TRUE(got[0].logprob.has_value());
  const TokenLogprob& tl = *got[0].logprob;
  EXPECT_EQ(tl.token, want);
  EXPECT_TRUE(same_bits(tl.logprob, l[want])) << tl.logprob << " vs " << l[want];
  ASSERT_EQ(tl.top.size(), 5u);
  EXPECT_EQ(tl.top[0].first, raw_best) << "logprobs must be those of the raw logits";
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(tl.top[i].first, order[i]) << "rank " << i;
    EXPECT_TRUE(same_bits(tl.top[i].second, l[order[i]])) << "rank " << i;
  }
}

// Prefill (no penalties), then two decode steps, the second launched before the first one's token
// is read (overlap) or after it (sequential). The penalties are chosen so that the token in flight
// decides the second decode: with frequency f = 100 and presence p = -250 a token found c times
// among the outputs moves by -(f * c + p) = +150, +50, -50 for c = 1, 2, 3 (far beyond the tiny
// model's logit spread; the server limits these to [-2, 2], the op does not). The history is made
// [t0, t0], so decode 1 picks t0 again (c = 2: +50), and decode 2 must avoid it (c = 3 counting
// the token still in flight: -50); a launched step that missed that token would pick t0 (c = 2).
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
};

Trace decode_three(bool overlap) {
  auto runner = make_runner();
  ModelStepExecutor exec(*runner);
  const int64_t vocab = runner->model_config().vocab_size;
  Req req;
  for (int i = 0; i < 9; ++i) req.prompt_ids.push_back(static_cast<int32_t>((i * 11 + 3) % std::min<int64_t>(vocab, 23)));
  req.params.temperature = 0.0f;
  req.params.logprobs = 3;
  const int32_t slot = runner->req_to_token().alloc();
  const int32_t n = static_cast<int32_t>(req.prompt_ids.size());
  auto item_for = [&](int32_t prefix, std::vector<int32_t> ids, int32_t pending) {
    StepItem it;
    it.req = &req;
    it.entry.req_slot = slot;
    it.entry.prefix_len = prefix;
    it.entry.new_slots = iota_slots(prefix, static_cast<int32_t>(ids.size()));
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
  req.output_ids.push_back(t.tokens[0]);  // history [t0, t0] (the KV holds one t0 input later)
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

TEST(StepExecutor, LaunchedStepCountsTheTokenInFlight) {
  const Trace seq = decode_three(false);
  const Trace ovl = decode_three(true);
  EXPECT_EQ(ovl.tokens, seq.tokens);
  for (const Trace* t : {&seq, &ovl}) {
    ASSERT_EQ(t->tokens.size(), 3u);
    EXPECT_EQ(t->tokens[1], t->tokens[0]) << "decode 1 should repeat t0 (count 2: +50)";
    EXPECT_NE(t->tokens[2], t->tokens[0]) << "decode 2 must count the token in flight (count 3: -50)";
  }
  ASSERT_EQ(ovl.logprobs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ovl.logprobs[i].token, seq.tokens[i]);
    EXPECT_TRUE(same_bits(ovl.logprobs[i].logprob, seq.logprobs[i].logprob)) << "step " << i;
    EXPECT_EQ(ovl.logprobs[i].top, seq.logprobs[i].top) << "step " << i;
    EXPECT_EQ(ovl.logprobs[i].top.size(), 3u);
  }
}

// A constrained request (a grammar that allows any text) through two decode steps, the second
// launched before the first is read, sampled by finish_launch() once it is. With frequency 100 and
// presence -350 a token found c times among the outputs moves by +150, +50, -50 for c = 2, 3, 4:
// history [t0, t0], decode 1 picks t0 (c = 2), decode 2 picks t0 again (c = 3); counting the token
// in flight twice (outputs and table) would make it c = 4 and avoid t0.
std::vector<int32_t> decode_three_constrained(bool overlap) {
  auto runner = make_runner();
  ModelStepExecutor exec(*runner);
  auto tok = load_tokenizer(std::string(RADIXLM_SOURCE_DIR) + "/tests/data/tokenizer/tiny512/tokenizer.json");
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  const int64_t vocab = runner->model_config().vocab_size;
  grammar::GrammarCompiler compiler(**tok, vocab, {*(*tok)->token_to_id("<|endoftext|>")});
  auto g = compiler.compile({grammar::GrammarKind::kRegex, "(.|\\n)*", false});
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  Req req;
  for (int i = 0; i < 9; ++i) req.prompt_ids.push_back(static_cast<int32_t>((i * 11 + 3) % std::min<int64_t>(vocab, 23)));
  req.params.temperature = 0.0f;
  req.grammar = std::make_shared<grammar::GrammarMatcher>(*g);
  const int32_t slot = runner->req_to_token().alloc();
  const int32_t n = static_cast<int32_t>(req.prompt_ids.size());
  auto item_for = [&](int32_t prefix, std::vector<int32_t> ids, int32_t pending) {
    StepItem it;
    it.req = &req;
    it.entry.req_slot = slot;
    it.entry.prefix_len = prefix;
    it.entry.new_slots = iota_slots(prefix, static_cast<int32_t>(ids.size()));
    it.entry.new_ids = std::move(ids);
    it.pending_outputs = pending;
    return it;
  };
  std::vector<int32_t> tokens;
  auto take = [&](const SampleResult& r) {
    tokens.push_back(r.token);
    req.output_ids.push_back(r.token);
    EXPECT_TRUE(req.grammar->accept(r.token)) << "token " << r.token;
  };
  take(exec.run(ForwardMode::kExtend, {item_for(0, req.prompt_ids, 0)}).at(0));
  req.output_ids.push_back(tokens[0]);  // history [t0, t0]
  EXPECT_TRUE(req.grammar->accept(tokens[0]));
  req.params.frequency_penalty = 100.0f;
  req.params.presence_penalty = -350.0f;
  if (overlap) {
    auto first = exec.launch(ForwardMode::kDecode, {item_for(n, {req.output_ids.back()}, 0)});
    exec.finish_launch(*first);
    auto second = exec.launch(ForwardMode::kDecode, {item_for(n + 1, {kFutureToken}, 1)});
    take(exec.wait(*first).at(0));
    exec.finish_launch(*second);
    take(exec.wait(*second).at(0));
  } else {
    take(exec.run(ForwardMode::kDecode, {item_for(n, {req.output_ids.back()}, 0)}).at(0));
    take(exec.run(ForwardMode::kDecode, {item_for(n + 1, {req.output_ids.back()}, 0)}).at(0));
  }
  return tokens;
}

TEST(StepExecutor, ConstrainedLaunchedStepCountsTheTokenInFlightOnce) {
  const std::vector<int32_t> seq = decode_three_constrained(false);
  const std::vector<int32_t> ovl = decode_three_constrained(true);
  ASSERT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[1], seq[0]) << "decode 1 should repeat t0 (count 2: +150)";
  EXPECT_EQ(seq[2], seq[0]) << "decode 2 should repeat t0 (count 3: +50)";
  EXPECT_EQ(ovl, seq);
}

}  // namespace
}  // namespace rlm
