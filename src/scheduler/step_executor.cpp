#include "scheduler/step_executor.h"

#include <algorithm>
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

// Which logits rows of a step predict prompt tokens (items with prompt_logprobs >= 0).
struct PromptRows {
  struct Span {
    size_t item = 0;
    int64_t first_pos = 0;  // the prompt position the span's first row predicts
    int64_t row0 = 0;       // its logits row
    int64_t count = 0;
    int32_t k = 0;
  };
  std::vector<Span> spans;
  std::vector<int32_t> targets;      // per logits row: the prompt token it predicts (0 on other rows)
  std::vector<int64_t> sample_rows;  // the logits rows of the sampled items, in order
  int64_t k = 0;                     // the largest k
};

// A launched step: its samples (and prompt logprobs) stay on the device until wait().
class ModelLaunchedStep : public LaunchedStep {
 public:
  DeviceSamples samples;
  DeviceLogprobs prompt;
  std::vector<PromptRows::Span> spans;
  std::vector<int32_t> targets;
  // With grammar-constrained rows the sampling waits for finish_launch(), holding the logits and
  // each row's matcher (null: free row).
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

// The batch entries of a step: items that do not sample get no logits row, prompt-logprob chunks
// one per token, so the model's logits rows are the sampled items (and those chunks), in order.
// rows: the sampler's rows of the sampled items; req_slots: their request slots; prompt: where the
// prompt-logprob rows are.
std::vector<BatchEntry> step_entries(const std::vector<StepItem>& items, std::vector<SampleRow>& rows,
                                     std::vector<int32_t>& req_slots, PromptRows& prompt) {
  std::vector<BatchEntry> entries;
  entries.reserve(items.size());
  int64_t row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    RLM_CHECK(!it.entry.all_logits) << "request slot " << it.entry.req_slot << " asks for every logits row";
    entries.push_back(it.entry);
    BatchEntry& e = entries.back();
    const int64_t n = static_cast<int64_t>(e.new_ids.size());
    if (it.prompt_logprobs >= 0 && !it.decode) {
      e.all_logits = true;
      const std::vector<int32_t>& ids = it.req->prompt_ids;
      PromptRows::Span span;
      span.item = i;
      span.first_pos = e.prefix_len + 1;
      span.row0 = row;
      span.count = std::clamp<int64_t>(static_cast<int64_t>(ids.size()) - span.first_pos, 0, n);
      span.k = it.prompt_logprobs;
      prompt.targets.resize(static_cast<size_t>(row + n), 0);
      for (int64_t j = 0; j < span.count; ++j) prompt.targets[row + j] = ids[span.first_pos + j];
      prompt.k = std::max<int64_t>(prompt.k, span.k);
      prompt.spans.push_back(span);
      row += n;
      if (it.sample) prompt.sample_rows.push_back(row - 1);
    } else {
      e.skip_logits = !it.sample;
      if (it.sample) prompt.sample_rows.push_back(row++);
    }
    if (!it.sample) continue;
    rows.push_back(sample_row(it));
    req_slots.push_back(it.entry.req_slot);
  }
  prompt.targets.resize(static_cast<size_t>(row), 0);
  return entries;
}

// Queues the prompt logprobs of a step whose logits rows are laid out as `prompt` says; returns the
// logits of the sampled rows (`logits` itself when there are no prompt rows; else a copy, as the
// prompt rows are log-softmaxed in place).
Tensor split_prompt_logprobs(const Tensor& logits, const PromptRows& prompt, ModelLaunchedStep& step) {
  if (prompt.spans.empty()) return logits;
  const int64_t vocab = logits.size(1);
  Tensor sampled = Tensor::empty({static_cast<int64_t>(prompt.sample_rows.size()), vocab}, DType::kF32,
                                 logits.device());
  copy_rows(logits, prompt.sample_rows, sampled);
  ops::log_softmax(logits);
  step.prompt = DeviceLogprobs::queue(logits, Tensor::from_vector(prompt.targets).to(logits.device()), prompt.k);
  step.spans = prompt.spans;
  step.targets = prompt.targets;
  return sampled;
}

// Reads a step's prompt logprobs (waits for the device).
std::vector<PromptLogprobs> read_prompt_logprobs(const ModelLaunchedStep& step) {
  std::vector<PromptLogprobs> out;
  if (step.spans.empty()) return out;
  const DeviceLogprobs host = step.prompt.to_host();
  for (const PromptRows::Span& span : step.spans) {
    PromptLogprobs p;
    p.item = span.item;
    p.first_pos = span.first_pos;
    for (int64_t j = 0; j < span.count; ++j) {
      const int64_t r = span.row0 + j;
      p.tokens.push_back(host.row(r, step.targets[r], span.k));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

std::unique_ptr<LaunchedStep> ModelStepExecutor::launch(ForwardMode mode, const std::vector<StepItem>& items) {
  RLM_CHECK(!items.empty()) << "launch() of an empty step";
  std::vector<SampleRow> rows;
  std::vector<int32_t> req_slots;
  PromptRows prompt;
  ForwardBatch batch = runner_.build_batch(mode, step_entries(items, rows, req_slots, prompt));
  auto step = std::make_unique<ModelLaunchedStep>();
  Tensor logits = split_prompt_logprobs(runner_.forward(batch), prompt, *step);  // sampled rows, on the device
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
  prompt_logprobs_ = read_prompt_logprobs(*s);
  if (!s->samples.tokens.defined()) return {};  // nothing sampled (prompt chunks only)
  return Sampler::read(s->samples);
}

std::vector<SampleResult> ModelStepExecutor::run(ForwardMode mode, const std::vector<StepItem>& items) {
  std::vector<SampleRow> rows;
  std::vector<int32_t> req_slots;
  PromptRows prompt;
  ForwardBatch batch = runner_.build_batch(mode, step_entries(items, rows, req_slots, prompt));
  ModelLaunchedStep step;
  const Tensor logits = split_prompt_logprobs(runner_.forward(batch), prompt, step);
  RLM_CHECK_EQ(logits.size(0), static_cast<int64_t>(rows.size())) << " logits rows vs sampled items";
  if (!rows.empty()) {
    const std::vector<std::shared_ptr<grammar::GrammarMatcher>> matchers = row_matchers(items);
    if (matchers.empty()) {
      step.samples = sampler_.launch(logits, rows);
    } else {
      const TokenBitmask masks = fill_masks(matchers, logits.size(1));
      step.samples = sampler_.launch(logits, rows, &masks);
    }
  }
  step.sampled = true;
  return wait(step);
}

}  // namespace rlm
