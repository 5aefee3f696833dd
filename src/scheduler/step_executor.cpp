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

std::vector<SampleResult> ModelStepExecutor::run(ForwardMode mode, const std::vector<StepItem>& items) {
  std::vector<BatchEntry> entries;
  entries.reserve(items.size());
  for (const StepItem& it : items) entries.push_back(it.entry);
  ForwardBatch batch = runner_.build_batch(mode, entries);
  Tensor logits = runner_.forward(batch).to(Device::cpu());  // [batch_size, vocab] (last token of each entry)
  const int64_t vocab = logits.size(1);

  std::vector<int64_t> rows;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].sample) rows.push_back(static_cast<int64_t>(i));
  }
  std::vector<SampleResult> results(rows.size());
  if (rows.empty()) return results;
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
    ops::SamplingRow& row = sampling[k];
    row.temperature = req.params.temperature;
    row.top_k = req.params.top_k;
    row.top_p = req.params.top_p;
    row.min_p = req.params.min_p;
    row.seed = req.seed;
    row.step = req.output_ids.size();
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
