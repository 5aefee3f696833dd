#include "engine/sampler.h"

#include <algorithm>

#include "ops/token_ops.h"

namespace rlm {

SampleRow SampleRow::greedy() {
  SampleRow r;
  r.sampling.temperature = 0.0f;
  return r;
}

int32_t* TokenBitmask::add_row(int32_t row) {
  rows.push_back(row);
  words.resize(rows.size() * static_cast<size_t>(words_per_row));
  return words.data() + (rows.size() - 1) * static_cast<size_t>(words_per_row);
}

std::vector<int32_t> sampled_tokens(const std::vector<SampleResult>& results) {
  std::vector<int32_t> tokens;
  tokens.reserve(results.size());
  for (const SampleResult& r : results) tokens.push_back(r.token);
  return tokens;
}

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

DeviceSamples Sampler::launch(const Tensor& logits, const std::vector<SampleRow>& rows,
                              const TokenBitmask* masks) const {
  const int64_t n = logits.size(0), vocab = logits.size(1);
  RLM_CHECK_EQ(n, static_cast<int64_t>(rows.size())) << " logits rows vs sampled rows";
  const Device dev = logits.device();
  DeviceSamples s;
  s.logprob_row.assign(rows.size(), -1);
  s.logprob_k.assign(rows.size(), 0);
  std::vector<int64_t> lp_rows;
  int64_t k = 0;
  std::vector<ops::SamplingRow> sampling;
  ops::PenaltyBatch penalties;
  for (size_t i = 0; i < rows.size(); ++i) {
    const SampleRow& row = rows[i];
    sampling.push_back(row.sampling);
    if (row.logprobs >= 0) {
      s.logprob_row[i] = static_cast<int32_t>(lp_rows.size());
      s.logprob_k[i] = static_cast<int32_t>(std::min<int64_t>(row.logprobs, vocab));
      k = std::max<int64_t>(k, s.logprob_k[i]);
      lp_rows.push_back(static_cast<int64_t>(i));
    }
    static const ops::LogitBias kNoBias;
    const ops::LogitBias& bias = row.logit_bias != nullptr ? *row.logit_bias : kNoBias;
    if (cpu::penalty_row_active(row.penalty)) {
      RLM_CHECK(row.prompt_ids != nullptr && row.output_ids != nullptr) << "row " << i << ": penalties without tokens";
      penalties.add_row(row.penalty, *row.prompt_ids, *row.output_ids, bias);
    } else {
      penalties.add_row(row.penalty, {}, {}, bias);
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
  if (penalties.any_active()) ops::apply_penalties(logits, penalties, future_tokens_);
  if (masks != nullptr && !masks->empty()) {
    // One upload: the row indices, then the masks.
    const int64_t m = static_cast<int64_t>(masks->rows.size()), w = masks->words_per_row;
    RLM_CHECK_EQ(static_cast<int64_t>(masks->words.size()), m * w) << " bitmask words for " << m << " rows";
    std::vector<int32_t> packed(masks->rows);
    packed.insert(packed.end(), masks->words.begin(), masks->words.end());
    const Tensor both = Tensor::from_vector(packed).to(dev);
    ops::apply_token_bitmask(logits, both.slice(0, m, m + m * w).view({m, w}), both.slice(0, 0, m));
  }
  s.tokens = Tensor::empty({n}, DType::kI32, dev);
  ops::sample(logits, sampling, s.tokens);
  if (dev.is_cuda()) {
    s.tokens_host = std::make_shared<AsyncDownload>(s.tokens.data_ptr(), dev, static_cast<size_t>(n) * sizeof(int32_t));
  }
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
    s.logprobs = DeviceLogprobs::queue(logprobs, lp_tokens, k);
  }
  return s;
}

DeviceLogprobs DeviceLogprobs::queue(const Tensor& logprobs, const Tensor& tokens, int64_t k) {
  const int64_t n = logprobs.size(0);
  const Device dev = logprobs.device();
  DeviceLogprobs d;
  d.chosen = Tensor::empty({n}, DType::kF32, dev);
  d.top_ids = Tensor::empty({n, k}, DType::kI32, dev);
  d.top_values = Tensor::empty({n, k}, DType::kF32, dev);
  ops::top_logprobs(logprobs, tokens, d.chosen, d.top_ids, d.top_values);
  return d;
}

DeviceLogprobs DeviceLogprobs::to_host() const {
  DeviceLogprobs h;
  h.chosen = chosen.to(Device::cpu());
  h.top_ids = top_ids;
  h.top_values = top_values;
  if (top_ids.size(1) > 0) {
    h.top_ids = top_ids.to(Device::cpu());
    h.top_values = top_values.to(Device::cpu());
  }
  return h;
}

TokenLogprob DeviceLogprobs::row(int64_t r, int32_t token, int32_t k) const {
  const int64_t width = top_ids.size(1);
  TokenLogprob lp;
  lp.token = token;
  lp.logprob = chosen.data<float>()[r];
  for (int32_t q = 0; q < k; ++q) {
    lp.top.emplace_back(top_ids.data<int32_t>()[r * width + q], top_values.data<float>()[r * width + q]);
  }
  return lp;
}

std::vector<SampleResult> Sampler::read(const DeviceSamples& s) {
  std::vector<SampleResult> results(static_cast<size_t>(s.tokens.numel()));
  if (s.tokens_host) {
    const auto* tokens = static_cast<const int32_t*>(s.tokens_host->wait());
    for (size_t i = 0; i < results.size(); ++i) results[i].token = tokens[i];
  } else {
    const Tensor tokens = s.tokens.to(Device::cpu());
    for (size_t i = 0; i < results.size(); ++i) results[i].token = tokens.data<int32_t>()[i];
  }
  if (!s.logprobs.chosen.defined()) return results;
  const DeviceLogprobs host = s.logprobs.to_host();
  for (size_t i = 0; i < results.size(); ++i) {
    const int32_t j = s.logprob_row[i];
    if (j >= 0) results[i].logprob = host.row(j, results[i].token, s.logprob_k[i]);
  }
  return results;
}

}  // namespace rlm
