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

std::unique_ptr<LaunchedStep> ModelStepExecutor::launch(ForwardMode mode, const std::vector<StepItem>& items) {
  RLM_CHECK(!items.empty()) << "launch() of an empty step";
  std::vector<BatchEntry> entries;
  std::vector<SampleRow> rows;
  for (const StepItem& it : items) {
    RLM_CHECK(it.sample && !it.entry.all_logits)
        << "launch(): every item must sample one token (request slot " << it.entry.req_slot << ")";
    entries.push_back(it.entry);
    rows.push_back(sample_row(it));
  }
  ForwardBatch batch = runner_.build_batch(mode, entries);
  Tensor logits = runner_.forward(batch);  // [num_items, vocab] on the device
  DeviceSamples samples = sampler_.launch(logits, rows);
  runner_.record_sampled_tokens(samples.tokens, batch);
  return std::make_unique<ModelLaunchedStep>(std::move(samples));
}

std::vector<SampleResult> ModelStepExecutor::wait(LaunchedStep& step) {
  auto* s = dynamic_cast<ModelLaunchedStep*>(&step);
  RLM_CHECK(s != nullptr) << "wait() on a step this executor did not launch";
  return Sampler::read(s->samples);
}

std::vector<SampleResult> ModelStepExecutor::run(ForwardMode mode, const std::vector<StepItem>& items) {
  std::vector<BatchEntry> entries;
  entries.reserve(items.size());
  for (const StepItem& it : items) {
    RLM_CHECK(!it.entry.all_logits) << "run(): request slot " << it.entry.req_slot << " asks for every logits row";
    entries.push_back(it.entry);
  }
  ForwardBatch batch = runner_.build_batch(mode, entries);
  Tensor logits = runner_.forward(batch);  // [batch_size, vocab] (last token of each entry), on the device
  RLM_CHECK_EQ(logits.size(0), static_cast<int64_t>(items.size())) << " logits rows vs step items";

  std::vector<int64_t> rows;
  std::vector<SampleRow> sampled;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].sample) continue;
    rows.push_back(static_cast<int64_t>(i));
    sampled.push_back(sample_row(items[i]));
  }
  if (rows.empty()) return {};
  Tensor selected = logits;
  if (rows.size() != items.size()) {
    selected = Tensor::empty({static_cast<int64_t>(rows.size()), logits.size(1)}, DType::kF32, logits.device());
    copy_rows(logits, rows, selected);
  }
  return sampler_.sample(selected, sampled);
}

}  // namespace rlm
