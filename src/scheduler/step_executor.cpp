#include "scheduler/step_executor.h"

#include <algorithm>

#include "ops/sampling_ops.h"
#include "ops/token_ops.h"

namespace rlm {

std::unique_ptr<LaunchedStep> StepExecutor::launch(ForwardMode, const std::vector<StepItem>&) {
  fail("this step executor does not support overlap scheduling");
}

std::vector<SampleResult> StepExecutor::wait(LaunchedStep&) {
  fail("this step executor does not support overlap scheduling");
}

namespace {

ops::SamplingRow sampling_row(const StepItem& it) {
  const Req& req = *it.req;
  ops::SamplingRow row;
  row.temperature = req.params.temperature;
  row.top_k = req.params.top_k;
  row.top_p = req.params.top_p;
  row.min_p = req.params.min_p;
  row.seed = req.seed;
  row.step = req.output_ids.size() + static_cast<uint64_t>(it.pending_outputs);
  return row;
}

// dst[i] = src[rows[i]] for f32 [*, vocab] tensors on one device: one device-side copy per run of
// consecutive rows (queued on the stream; no host wait).
void copy_rows(const Tensor& src, const std::vector<int64_t>& rows, const Tensor& dst) {
  RLM_CHECK(src.is_contiguous() && dst.is_contiguous()) << "copy_rows: " << src.describe() << " -> " << dst.describe();
  size_t i = 0;
  while (i < rows.size()) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j] == rows[j - 1] + 1) ++j;
    const int64_t len = static_cast<int64_t>(j - i);
    dst.slice(0, static_cast<int64_t>(i), static_cast<int64_t>(j)).copy_(src.slice(0, rows[i], rows[i] + len));
    i = j;
  }
}

// What a sampled step leaves on the model's device until its results are read.
struct DeviceSamples {
  Tensor tokens;                     // i32 [num_rows]
  Tensor chosen;                     // f32 [num_logprob_rows]; undefined when no row wants logprobs
  Tensor top_ids;                    // i32 [num_logprob_rows, k] (k: the largest request)
  Tensor top_values;                 // f32 [num_logprob_rows, k]
  std::vector<int32_t> logprob_row;  // [num_rows]: the row's index in chosen/top_*, -1: none
  std::vector<int32_t> logprob_k;    // [num_rows]: top alternatives the row asked for
};

// Samples one token per row. logits: f32 [rows.size(), vocab] on the model's device, contiguous;
// penalised in place. future_tokens: the runner's table (a row with pending_outputs > 0 reads its
// newest output token there). Queues work only: nothing waits for the device.
DeviceSamples sample_rows(const Tensor& logits, const std::vector<const StepItem*>& rows, const Tensor& future_tokens) {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  RLM_CHECK_EQ(n, static_cast<int64_t>(rows.size())) << " logits rows vs sampled items";
  const Device dev = logits.device();
  DeviceSamples s;
  s.logprob_row.assign(rows.size(), -1);
  s.logprob_k.assign(rows.size(), 0);
  std::vector<int64_t> lp_rows;
  int64_t k = 0;
  std::vector<ops::SamplingRow> sampling;
  ops::PenaltyBatch penalties;
  for (size_t i = 0; i < rows.size(); ++i) {
    const StepItem& it = *rows[i];
    const SamplingParams& p = it.req->params;
    sampling.push_back(sampling_row(it));
    if (p.logprobs >= 0) {
      s.logprob_row[i] = static_cast<int32_t>(lp_rows.size());
      s.logprob_k[i] = static_cast<int32_t>(std::min<int64_t>(p.logprobs, vocab));
      k = std::max<int64_t>(k, s.logprob_k[i]);
      lp_rows.push_back(static_cast<int64_t>(i));
    }
    ops::PenaltyRow pr;
    pr.repetition = p.repetition_penalty;
    pr.frequency = p.frequency_penalty;
    pr.presence = p.presence_penalty;
    if (cpu::penalty_row_active(pr)) {
      RLM_CHECK(it.pending_outputs == 0 || it.pending_outputs == 1)
          << "request slot " << it.entry.req_slot << ": " << it.pending_outputs
          << " unread outputs (the future-token table holds one)";
      pr.pending_slot = it.pending_outputs > 0 ? it.entry.req_slot : -1;
      penalties.add_row(pr, it.req->prompt_ids, it.req->output_ids);
    } else {
      penalties.add_row(pr, {}, {});
    }
  }
  const int64_t num_lp = static_cast<int64_t>(lp_rows.size());
  Tensor logprobs;
  if (num_lp > 0) {
    // Logprobs of the model's distribution (before penalties and temperature), like vLLM.
    logprobs = Tensor::empty({num_lp, vocab}, DType::kF32, dev);
    copy_rows(logits, lp_rows, logprobs);
    ops::log_softmax(logprobs);
  }
  if (penalties.any_active()) ops::apply_penalties(logits, penalties, future_tokens);
  s.tokens = Tensor::empty({n}, DType::kI32, dev);
  ops::sample(logits, sampling, s.tokens);
  if (num_lp > 0) {
    Tensor lp_tokens = s.tokens;
    if (num_lp != n) {
      // The logprob rows' tokens, gathered on the device: resolve_future_tokens sets ids[i] =
      // table[slots[i]] where ids[i] < 0, here with ids all -1 and the sampled tokens as the table.
      std::vector<int32_t> packed(static_cast<size_t>(num_lp), -1);
      for (int64_t r : lp_rows) packed.push_back(static_cast<int32_t>(r));
      const Tensor both = Tensor::from_vector(packed).to(dev);
      lp_tokens = both.slice(0, 0, num_lp);
      ops::resolve_future_tokens(lp_tokens, both.slice(0, num_lp, 2 * num_lp), s.tokens);
    }
    s.chosen = Tensor::empty({num_lp}, DType::kF32, dev);
    s.top_ids = Tensor::empty({num_lp, k}, DType::kI32, dev);
    s.top_values = Tensor::empty({num_lp, k}, DType::kF32, dev);
    ops::top_logprobs(logprobs, lp_tokens, s.chosen, s.top_ids, s.top_values);
  }
  return s;
}

// Copies a step's samples to the host (waits for the device) as one result per row.
std::vector<SampleResult> read_samples(const DeviceSamples& s) {
  const Tensor tokens = s.tokens.to(Device::cpu());
  std::vector<SampleResult> results(static_cast<size_t>(tokens.numel()));
  for (size_t i = 0; i < results.size(); ++i) results[i].token = tokens.data<int32_t>()[i];
  if (!s.chosen.defined()) return results;
  const Tensor chosen = s.chosen.to(Device::cpu());
  const int64_t k = s.top_ids.size(1);
  Tensor ids, values;
  if (k > 0) {
    ids = s.top_ids.to(Device::cpu());
    values = s.top_values.to(Device::cpu());
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const int32_t j = s.logprob_row[i];
    if (j < 0) continue;
    TokenLogprob lp;
    lp.token = results[i].token;
    lp.logprob = chosen.data<float>()[j];
    for (int32_t q = 0; q < s.logprob_k[i]; ++q) {
      lp.top.emplace_back(ids.data<int32_t>()[j * k + q], values.data<float>()[j * k + q]);
    }
    results[i].logprob = std::move(lp);
  }
  return results;
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
// rows are the sampled items, in order. sampled: those items; req_slots: their request slots.
std::vector<BatchEntry> step_entries(const std::vector<StepItem>& items, std::vector<const StepItem*>& sampled,
                                     std::vector<int32_t>& req_slots) {
  std::vector<BatchEntry> entries;
  entries.reserve(items.size());
  for (const StepItem& it : items) {
    RLM_CHECK(!it.entry.all_logits) << "request slot " << it.entry.req_slot << " asks for every logits row";
    entries.push_back(it.entry);
    entries.back().skip_logits = !it.sample;
    if (!it.sample) continue;
    sampled.push_back(&it);
    req_slots.push_back(it.entry.req_slot);
  }
  return entries;
}

}  // namespace

std::unique_ptr<LaunchedStep> ModelStepExecutor::launch(ForwardMode mode, const std::vector<StepItem>& items) {
  RLM_CHECK(!items.empty()) << "launch() of an empty step";
  std::vector<const StepItem*> rows;
  std::vector<int32_t> req_slots;
  ForwardBatch batch = runner_.build_batch(mode, step_entries(items, rows, req_slots));
  Tensor logits = runner_.forward(batch);  // [rows.size(), vocab] on the device
  if (rows.empty()) return std::make_unique<ModelLaunchedStep>(DeviceSamples{});
  DeviceSamples samples = sample_rows(logits, rows, runner_.future_tokens());
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
  return read_samples(s->samples);
}

std::vector<SampleResult> ModelStepExecutor::run(ForwardMode mode, const std::vector<StepItem>& items) {
  std::vector<const StepItem*> rows;
  std::vector<int32_t> req_slots;
  ForwardBatch batch = runner_.build_batch(mode, step_entries(items, rows, req_slots));
  Tensor logits = runner_.forward(batch);  // [rows.size(), vocab] on the device
  RLM_CHECK_EQ(logits.size(0), static_cast<int64_t>(rows.size())) << " logits rows vs sampled items";
  if (rows.empty()) return {};
  return read_samples(sample_rows(logits, rows, runner_.future_tokens()));
}

}  // namespace rlm
