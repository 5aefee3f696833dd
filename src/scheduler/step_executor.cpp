#include "scheduler/step_executor.h"

#include "grammar/grammar.h"

namespace rlm {

std::unique_ptr<LaunchedStep> StepExecutor::launch(ForwardMode, const std::vector<StepItem>&) {
  fail("this step executor does not support overlap scheduling");
}

std::vector<SampleResult> StepExecutor::wait(LaunchedStep&) {
  fail("this step executor does not support overlap scheduling");
}

namespace {

// The sampler's row for a step item: the request's sampling settings, penalties (counting a token
// still in flight through the future-token table) and logprob request.
SampleRow sample_row(const StepItem& it) {
  const Req& req = *it.req;
  const SamplingParams& p = req.params;
  SampleRow row;
  row.sampling.temperature = p.temperature;
  row.sampling.top_k = p.top_k;
  row.sampling.top_p = p.top_p;
  row.sampling.min_p = p.min_p;
  row.sampling.seed = req.seed;
  row.sampling.step = req.output_ids.size() + static_cast<uint64_t>(it.pending_outputs);
  row.penalty.repetition = p.repetition_penalty;
  row.penalty.frequency = p.frequency_penalty;
  row.penalty.presence = p.presence_penalty;
  if (cpu::penalty_row_active(row.penalty)) {
    RLM_CHECK(it.pending_outputs == 0 || it.pending_outputs == 1)
        << "request slot " << it.entry.req_slot << ": " << it.pending_outputs
        << " unread outputs (the future-token table holds one)";
    row.penalty.pending_slot = it.pending_outputs > 0 ? it.entry.req_slot : -1;
    row.prompt_ids = &req.prompt_ids;
    row.output_ids = &req.output_ids;
  }
  row.logprobs = p.logprobs;
  if (!p.logit_bias.empty()) row.logit_bias = &p.logit_bias;
  return row;
}

// A launched step: its samples stay on the device until wait(). With grammar-constrained rows the
// sampling waits for finish_launch(), holding the logits and each row's matcher (null: free row).
class ModelLaunchedStep : public LaunchedStep {
 public:
  DeviceSamples samples;
  bool sampled = false;
  Tensor logits;  // [rows.size(), vocab] on the device, until sampled
  std::vector<SampleRow> rows;
  std::vector<std::shared_ptr<grammar::GrammarMatcher>> matchers;  // [rows.size()]
  std::vector<int32_t> req_slots;                                  // [rows.size()]
};

// The grammar matchers of a step's sampled items, in row order; empty when no row has one.
std::vector<std::shared_ptr<grammar::GrammarMatcher>> row_matchers(const std::vector<StepItem>& items) {
  std::vector<std::shared_ptr<grammar::GrammarMatcher>> matchers;
  bool any = false;
  for (const StepItem& it : items) {
    if (!it.sample) continue;
    matchers.push_back(it.req->grammar);
    any = any || it.req->grammar != nullptr;
  }
  if (!any) matchers.clear();
  return matchers;
}

// The bitmasks of the constrained rows, filled by their matchers (which must have accepted every
// token sampled before this step).
TokenBitmask fill_masks(const std::vector<std::shared_ptr<grammar::GrammarMatcher>>& matchers, int64_t vocab) {
  TokenBitmask masks;
  masks.words_per_row = grammar::bitmask_words(vocab);
  std::vector<grammar::GrammarMatcher*> live;
  for (size_t i = 0; i < matchers.size(); ++i) {
    if (matchers[i] == nullptr) continue;
    RLM_CHECK_EQ(matchers[i]->vocab_size(), vocab) << " grammar vocabulary vs the model's logits";
    masks.rows.push_back(static_cast<int32_t>(i));
    live.push_back(matchers[i].get());
  }
  masks.words.resize(live.size() * static_cast<size_t>(masks.words_per_row));
  grammar::GrammarMatcher::fill_batch(live, masks.words.data());
  return masks;
}

}  // namespace

namespace {

// The batch entries of a step: items that do not sample get no logits row, so the model's logits
// rows are the sampled items, in order. rows: the sampler's rows of those items; req_slots: their
// request slots.
std::vector<BatchEntry> step_entries(const std::vector<StepItem>& items, std::vector<SampleRow>& rows,
                                     std::vector<int32_t>& req_slots) {
  std::vector<BatchEntry> entries;
  entries.reserve(items.size());
  for (const StepItem& it : items) {
    RLM_CHECK(!it.entry.all_logits) << "request slot " << it.entry.req_slot << " asks for every logits row";
    entries.push_back(it.entry);
    entries.back().skip_logits = !it.sample;
    if (!it.sample) continue;
    rows.push_back(sample_row(it));
    req_slots.push_back(it.entry.req_slot);
  }
  return entries;
}

}  // namespace

std::unique_ptr<LaunchedStep> ModelStepExecutor::launch(ForwardMode mode, const std::vector<StepItem>& items) {
  RLM_CHECK(!items.empty()) << "launch() of an empty step";
  std::vector<SampleRow> rows;
  std::vector<int32_t> req_slots;
  ForwardBatch batch = runner_.build_batch(mode, step_entries(items, rows, req_slots));
  auto step = std::make_unique<ModelLaunchedStep>();
  Tensor logits = runner_.forward(batch);  // [rows.size(), vocab] on the device
  if (rows.empty()) {
    step->sampled = true;
    return step;
  }
  step->matchers = row_matchers(items);
  if (!step->matchers.empty()) {
    // Constrained rows: sampled by finish_launch() once their matchers are up to date.
    step->logits = std::move(logits);
    step->rows = std::move(rows);
    step->req_slots = std::move(req_slots);
    return step;
  }
  step->samples = sampler_.launch(logits, rows);
  step->sampled = true;
  if (rows.size() == items.size()) {
    runner_.record_sampled_tokens(step->samples.tokens, batch);
  } else {
    runner_.record_sampled_tokens(step->samples.tokens, req_slots);
  }
  return step;
}

void ModelStepExecutor::finish_launch(LaunchedStep& step) {
  auto* s = dynamic_cast<ModelLaunchedStep*>(&step);
  RLM_CHECK(s != nullptr) << "finish_launch() on a step this executor did not launch";
  if (s->sampled) return;
  // The step before this one has been processed: a token its penalties would have read from the
  // future-token table is in the request's output_ids now, so it must not be counted twice.
  for (SampleRow& row : s->rows) row.penalty.pending_slot = -1;
  const TokenBitmask masks = fill_masks(s->matchers, s->logits.size(1));
  s->samples = sampler_.launch(s->logits, s->rows, &masks);
  runner_.record_sampled_tokens(s->samples.tokens, s->req_slots);
  s->sampled = true;
  s->logits = Tensor();
  s->matchers.clear();
}

std::vector<SampleResult> ModelStepExecutor::wait(LaunchedStep& step) {
  auto* s = dynamic_cast<ModelLaunchedStep*>(&step);
  RLM_CHECK(s != nullptr) << "wait() on a step this executor did not launch";
  finish_launch(*s);
  if (!s->samples.tokens.defined()) return {};  // nothing sampled (prompt chunks only)
  return Sampler::read(s->samples);
}

std::vector<SampleResult> ModelStepExecutor::run(ForwardMode mode, const std::vector<StepItem>& items) {
  std::vector<SampleRow> rows;
  std::vector<int32_t> req_slots;
  ForwardBatch batch = runner_.build_batch(mode, step_entries(items, rows, req_slots));
  Tensor logits = runner_.forward(batch);  // [rows.size(), vocab] on the device
  RLM_CHECK_EQ(logits.size(0), static_cast<int64_t>(rows.size())) << " logits rows vs sampled items";
  if (rows.empty()) return {};
  const std::vector<std::shared_ptr<grammar::GrammarMatcher>> matchers = row_matchers(items);
  if (matchers.empty()) return sampler_.sample(logits, rows);
  const TokenBitmask masks = fill_masks(matchers, logits.size(1));
  return Sampler::read(sampler_.launch(logits, rows, &masks));
}

}  // namespace rlm
