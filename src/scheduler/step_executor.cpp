#include "scheduler/step_executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace rlm {

void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output) {
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(vocab, 0);
    for (int32_t t : prompt) seen[t] = 1;
    for (int32_t t : output) seen[t] = 1;
    for (int64_t t = 0; t < vocab; ++t) {
      if (!seen[t]) continue;
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : output) ++counts[t];
    for (const auto& [t, c] : counts) {
      logits[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
  }
}

namespace {

TokenLogprob make_logprob(const float* logprobs_row, int64_t vocab, int32_t token, int32_t top_k) {
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = logprobs_row[token];
  if (top_k > 0) {
    std::vector<int32_t> idx(vocab);
    for (int64_t i = 0; i < vocab; ++i) idx[i] = static_cast<int32_t>(i);
    const int64_t k = std::min<int64_t>(top_k, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logprobs_row[a] > logprobs_row[b] || (logprobs_row[a] == logprobs_row[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i) lp.top.emplace_back(idx[i], logprobs_row[idx[i]]);
  }
  return lp;
}

}  // namespace

bool device_sampling_ok(const SamplingParams& p) {
  return p.logprobs < 0 && p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
}

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

// A launched step: its sampled tokens stay on the device until wait().
class ModelLaunchedStep : public LaunchedStep {
 public:
  explicit ModelLaunchedStep(Tensor tokens) : tokens(std::move(tokens)) {}
  Tensor tokens;  // i32 [num_items] on the model's device
};

}  // namespace

std::unique_ptr<LaunchedStep> ModelStepExecutor::launch(ForwardMode mode, const std::vector<StepItem>& items) {
  RLM_CHECK(!items.empty()) << "launch() of an empty step";
  std::vector<BatchEntry> entries;
  std::vector<ops::SamplingRow> rows;
  for (const StepItem& it : items) {
    RLM_CHECK(it.sample && !it.entry.all_logits && device_sampling_ok(it.req->params))
        << "launch(): every item must sample on the device (request slot " << it.entry.req_slot << ")";
    entries.push_back(it.entry);
    rows.push_back(sampling_row(it));
  }
  ForwardBatch batch = runner_.build_batch(mode, entries);
  Tensor logits = runner_.forward(batch);  // [num_items, vocab] on the device
  Tensor tokens = Tensor::empty({logits.size(0)}, DType::kI32, logits.device());
  ops::sample(logits, rows, tokens);
  runner_.record_sampled_tokens(tokens, batch);
  return std::make_unique<ModelLaunchedStep>(std::move(tokens));
}

std::vector<SampleResult> ModelStepExecutor::wait(LaunchedStep& step) {
  auto* s = dynamic_cast<ModelLaunchedStep*>(&step);
  RLM_CHECK(s != nullptr) << "wait() on a step this executor did not launch";
  const Tensor host = s->tokens.to(Device::cpu());
  std::vector<SampleResult> results(static_cast<size_t>(host.numel()));
  for (int64_t i = 0; i < host.numel(); ++i) results[i].token = host.data<int32_t>()[i];
  return results;
}

std::vector<SampleResult> ModelStepExecutor::run(ForwardMode mode, const std::vector<StepItem>& items) {
  std::vector<BatchEntry> entries;
  entries.reserve(items.size());
  bool on_device = true;
  for (const StepItem& it : items) {
    entries.push_back(it.entry);
    if (it.sample) on_device = on_device && device_sampling_ok(it.req->params);
  }
  ForwardBatch batch = runner_.build_batch(mode, entries);
  Tensor logits = runner_.forward(batch);  // [batch_size, vocab] (last token of each entry), on the device

  std::vector<int64_t> rows;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].sample) rows.push_back(static_cast<int64_t>(i));
  }
  std::vector<SampleResult> results(rows.size());
  if (rows.empty()) return results;
  if (on_device) {
    // Sample where the logits are; only the tokens come back to the host.
    std::vector<ops::SamplingRow> sampling;
    std::vector<int32_t> row_ids;
    for (int64_t r : rows) {
      sampling.push_back(sampling_row(items[r]));
      row_ids.push_back(static_cast<int32_t>(r));
    }
    Tensor selected = logits;
    if (rows.size() != items.size()) {
      selected = Tensor::empty({static_cast<int64_t>(rows.size()), logits.size(1)}, DType::kF32, logits.device());
      ops::embedding(Tensor::from_vector(row_ids).to(logits.device()), logits, selected);
    }
    Tensor tokens = Tensor::empty({selected.size(0)}, DType::kI32, logits.device());
    ops::sample(selected, sampling, tokens);
    const Tensor host = tokens.to(Device::cpu());
    for (size_t k = 0; k < rows.size(); ++k) results[k].token = host.data<int32_t>()[k];
    return results;
  }
  logits = logits.to(Device::cpu());
  const int64_t vocab = logits.size(1);
  Tensor processed = Tensor::empty({static_cast<int64_t>(rows.size()), vocab}, DType::kF32);
  std::vector<ops::SamplingRow> sampling(rows.size());
  std::vector<Tensor> logprobs(rows.size());  // f32 [1, vocab] for rows that asked for logprobs
  for (size_t k = 0; k < rows.size(); ++k) {
    const Req& req = *items[rows[k]].req;
    const float* src = logits.data<float>() + rows[k] * vocab;
    float* dst = processed.data<float>() + static_cast<int64_t>(k) * vocab;
    std::memcpy(dst, src, vocab * sizeof(float));
    if (req.params.logprobs >= 0) {
      // Logprobs of the model's distribution (before penalties and temperature), like vLLM.
      logprobs[k] = Tensor::empty({1, vocab}, DType::kF32);
      std::memcpy(logprobs[k].data<float>(), src, vocab * sizeof(float));
      ops::log_softmax(logprobs[k]);
    }
    apply_penalties(dst, vocab, req.params, req.prompt_ids, req.output_ids);
    sampling[k] = sampling_row(items[rows[k]]);
  }
  Tensor out = Tensor::empty({static_cast<int64_t>(rows.size())}, DType::kI32);
  ops::sample(processed, sampling, out);
  for (size_t k = 0; k < rows.size(); ++k) {
    results[k].token = out.data<int32_t>()[k];
    if (logprobs[k].defined()) {
      results[k].logprob =
          make_logprob(logprobs[k].data<float>(), vocab, results[k].token, items[rows[k]].req->params.logprobs);
    }
  }
  return results;
}

}  // namespace rlm
