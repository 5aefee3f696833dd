#include "scheduler/step_executor.h"

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

// A launched step: its samples stay on the device until wait().
class ModelLaunchedStep : public LaunchedStep {
 public:
  explicit ModelLaunchedStep(DeviceSamples samples) : samples(std::move(samples)) {}
  DeviceSamples samples;
};

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
  Tensor logits = runner_.forward(batch);  // [rows.size(), vocab] on the device
  if (rows.empty()) return std::make_unique<ModelLaunchedStep>(DeviceSamples{});
  DeviceSamples samples = sampler_.launch(logits, rows);
  if (rows.size() == items.size()) {
    runner_.record_sampled_tokens(samples.tokens, batch);
  } else {
    runner_.record_sampled_tokens(samples.tokens, req_slots);
  }
  return std::make_unique<ModelLaunchedStep>(std::move(samples));
}

std::vector<SampleResult> ModelStepExecutor::wait(LaunchedStep& step) {
  auto* s = dynamic_cast<ModelLaunchedStep*>(&step);
  RLM_CHECK(s != nullptr) << "wait() on a step this executor did not launch";
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
  return sampler_.sample(logits, rows);
}

}  // namespace rlm
