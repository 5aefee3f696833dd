#include "ops/sampling_ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/token_bitmask.h"
#include "kernels/cpu/top_logprobs.h"
#include "ops/op_check.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/penalties.h"
#include "kernels/cuda/token_bitmask.h"
#include "kernels/cuda/top_logprobs.h"
#endif

namespace rlm::ops {

void PenaltyBatch::add_row(PenaltyRow row, const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                           const LogitBias& bias) {
  row.prompt_len = static_cast<int32_t>(prompt.size());
  rows.push_back(row);
  token_ids.insert(token_ids.end(), prompt.begin(), prompt.end());
  token_ids.insert(token_ids.end(), output.begin(), output.end());
  token_offsets.push_back(static_cast<int32_t>(token_ids.size()));
  for (const auto& [id, value] : bias) {
    bias_ids.push_back(id);
    bias_values.push_back(value);
  }
  bias_offsets.push_back(static_cast<int32_t>(bias_ids.size()));
}

bool PenaltyBatch::any_active() const {
  if (!bias_ids.empty()) return true;
  for (const PenaltyRow& r : rows) {
    if (cpu::penalty_row_active(r)) return true;
  }
  return false;
}

namespace {

using OpCheck = detail::OpChecker;

// Row stride of a 2-D tensor that tolerates size-1 rows.
int64_t row_stride(const Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); }

void check_rows_2d(const OpCheck& c, const char* name, const Tensor& t, const char* layout) {
  c.dtype(name, t, {DType::kF32});
  c.dims(name, t, 2, layout);
  c.unit_last_stride(name, t);
}

// Row r's logit_bias entries: ids distinct and inside [0, vocab), values finite.
void check_bias_row(const OpCheck& c, const PenaltyBatch& b, int64_t r, int64_t vocab) {
  const int64_t begin = b.bias_offsets[r], end = b.bias_offsets[r + 1];
  if (end < begin) c.fail_with(str("row ", r, ": bias_offsets decrease (", begin, " then ", end, ")"));
  std::vector<int32_t> ids(b.bias_ids.begin() + begin, b.bias_ids.begin() + end);
  for (int64_t j = begin; j < end; ++j) {
    if (b.bias_ids[j] < 0 || b.bias_ids[j] >= vocab) {
      c.fail_with(str("row ", r, ": logit_bias token id ", b.bias_ids[j], " is outside [0, ", vocab, ")"));
    }
    if (!std::isfinite(b.bias_values[j])) c.fail_with(str("row ", r, ": logit_bias value ", b.bias_values[j]));
  }
  std::sort(ids.begin(), ids.end());
  if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
    c.fail_with(str("row ", r, ": logit_bias lists token ", *std::adjacent_find(ids.begin(), ids.end()), " twice"));
  }
}

// Everything apply_penalties reads from the host, checked against the logits' shape.
void check_penalty_batch(const OpCheck& c, const PenaltyBatch& b, int64_t n, int64_t vocab, const Tensor& table) {
  constexpr int64_t kMaxRowTokens = (int64_t{1} << 30) - 2;  // the CUDA twin's count word
  if (static_cast<int64_t>(b.rows.size()) != n) c.fail_with(str(b.rows.size(), " penalty rows for ", n, " logits rows"));
  if (static_cast<int64_t>(b.token_offsets.size()) != n + 1 || b.token_offsets[0] != 0 ||
      b.token_offsets.back() != static_cast<int64_t>(b.token_ids.size())) {
    c.fail_with(str("token_offsets must have n + 1 = ", n + 1, " entries from 0 to the ", b.token_ids.size(),
                    " token ids (got ", b.token_offsets.size(), " entries)"));
  }
  if (static_cast<int64_t>(b.bias_offsets.size()) != n + 1 || b.bias_offsets[0] != 0 ||
      b.bias_offsets.back() != static_cast<int64_t>(b.bias_ids.size()) || b.bias_values.size() != b.bias_ids.size()) {
    c.fail_with(str("bias_offsets must have n + 1 = ", n + 1, " entries from 0 to the ", b.bias_ids.size(),
                    " bias ids, with as many values (got ", b.bias_offsets.size(), " entries, ", b.bias_values.size(),
                    " values)"));
  }
  for (int64_t r = 0; r < n; ++r) {
    const PenaltyRow& p = b.rows[r];
    const int64_t begin = b.token_offsets[r], end = b.token_offsets[r + 1];
    if (end < begin) c.fail_with(str("row ", r, ": token_offsets decrease (", begin, " then ", end, ")"));
    if (end - begin > kMaxRowTokens) c.fail_with(str("row ", r, ": ", end - begin, " tokens (at most ", kMaxRowTokens, ")"));
    if (!(p.repetition > 0.0f && std::isfinite(p.repetition)) || !std::isfinite(p.frequency) ||
        !std::isfinite(p.presence)) {
      c.fail_with(str("row ", r, ": bad penalties (repetition ", p.repetition, " must be finite and > 0; frequency ",
                      p.frequency, " and presence ", p.presence, " finite)"));
    }
    if (p.prompt_len < 0 || p.prompt_len > end - begin) {
      c.fail_with(str("row ", r, ": prompt_len ", p.prompt_len, " outside [0, ", end - begin, "] (its token count)"));
    }
    for (int64_t j = begin; j < end; ++j) {
      const int32_t t = b.token_ids[j];
      if (t < 0 || t >= vocab) {
        c.fail_with(str("row ", r, ": token id ", t, " at position ", j - begin, " of its list is outside [0, ", vocab, ")"));
      }
    }
    check_bias_row(c, b, r, vocab);
    if (p.pending_slot < -1) c.fail_with(str("row ", r, ": pending_slot ", p.pending_slot, " (must be -1 or a slot)"));
    if (p.pending_slot >= 0) {
      if (!table.defined()) c.fail_with(str("row ", r, ": pending_slot ", p.pending_slot, " but no future_tokens table"));
      if (p.pending_slot >= table.numel()) {
        c.fail_with(str("row ", r, ": pending_slot ", p.pending_slot, " outside the future_tokens table of ",
                        table.numel()));
      }
    }
  }
}

}  // namespace

void apply_penalties(const Tensor& logits, const PenaltyBatch& batch, const Tensor& future_tokens) {
  OpCheck c("apply_penalties");
  check_rows_2d(c, "logits", logits, "[n, vocab]");
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (future_tokens.defined()) {
    c.dtype("future_tokens", future_tokens, {DType::kI32});
    c.dims("future_tokens", future_tokens, 1, "[max_requests]");
    c.contiguous("future_tokens", future_tokens);
    c.same_device(logits, "future_tokens", future_tokens);
  }
  check_penalty_batch(c, batch, n, vocab, future_tokens);
  if (n == 0 || !batch.any_active()) return;
  const PenaltyRow* rows = batch.rows.data();
  const int32_t* table = future_tokens.defined() ? future_tokens.data<int32_t>() : nullptr;
  const Device d = logits.device();
  cpu::LogitBiasList bias;
  if (!batch.bias_ids.empty()) bias = {batch.bias_ids.data(), batch.bias_values.data(), batch.bias_offsets.data()};
  if (d.is_cpu()) {
    cpu::apply_penalties(logits.data<float>(), n, vocab, row_stride(logits), batch.token_ids.data(),
                         batch.token_offsets.data(), rows, table, bias);
  } else if (d.is_cuda()) {
#ifdef RADIXLM_WITH_CUDA
    cuda::apply_penalties(d.index, logits.data<float>(), n, vocab, row_stride(logits), batch.token_ids.data(),
                          batch.token_offsets.data(), rows, table, bias);
#else
    c.not_built(d);
#endif
  } else {
    c.not_built(d);
  }
}

void apply_token_bitmask(const Tensor& logits, const Tensor& bitmask, const Tensor& rows) {
  OpCheck c("apply_token_bitmask");
  check_rows_2d(c, "logits", logits, "[n, vocab]");
  const int64_t n = logits.size(0), vocab = logits.size(1);
  c.dtype("bitmask", bitmask, {DType::kI32});
  c.dims("bitmask", bitmask, 2, "[m, words]");
  c.contiguous("bitmask", bitmask);
  c.dtype("rows", rows, {DType::kI32});
  c.dims("rows", rows, 1, "[m]");
  c.contiguous("rows", rows);
  c.size("rows", rows, 0, bitmask.size(0), "m (bitmask.size(0))");
  c.same_device(logits, "bitmask", bitmask);
  c.same_device(logits, "rows", rows);
  const int64_t m = bitmask.size(0), words = bitmask.size(1);
  if (words * 32 < vocab) c.fail_with(str("bitmask ", bitmask.describe(), " has fewer than ", vocab, " bits per row"));
  if (m > n) c.fail_with(str(m, " mask rows for ", n, " logits rows"));
  if (m == 0) return;
  const Device d = logits.device();
  if (d.is_cpu()) {
    std::vector<char> seen(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < m; ++j) {
      const int32_t r = rows.data<int32_t>()[j];
      if (r < 0 || r >= n) c.fail_with(str("rows[", j, "] = ", r, " is outside [0, ", n, ")"));
      if (seen[r]++) c.fail_with(str("rows lists logits row ", r, " twice"));
    }
    cpu::apply_token_bitmask(logits.data<float>(), vocab, row_stride(logits), bitmask.data<int32_t>(), words,
                             rows.data<int32_t>(), m);
  } else if (d.is_cuda()) {
#ifdef RADIXLM_WITH_CUDA
    cuda::apply_token_bitmask(d.index, logits.data<float>(), vocab, row_stride(logits), bitmask.data<int32_t>(), words,
                              rows.data<int32_t>(), m);
#else
    c.not_built(d);
#endif
  } else {
    c.not_built(d);
  }
}

void top_logprobs(const Tensor& logprobs, const Tensor& tokens, const Tensor& chosen, const Tensor& top_ids,
                  const Tensor& top_values) {
  OpCheck c("top_logprobs");
  check_rows_2d(c, "logprobs", logprobs, "[n, vocab]");
  const int64_t n = logprobs.size(0), vocab = logprobs.size(1);
  c.dtype("tokens", tokens, {DType::kI32});
  c.dims("tokens", tokens, 1, "[n]");
  c.size("tokens", tokens, 0, n, "n (logprobs.size(0))");
  c.contiguous("tokens", tokens);
  c.dtype("chosen", chosen, {DType::kF32});
  c.dims("chosen", chosen, 1, "[n]");
  c.size("chosen", chosen, 0, n, "n (logprobs.size(0))");
  c.contiguous("chosen", chosen);
  c.dtype("top_ids", top_ids, {DType::kI32});
  c.dims("top_ids", top_ids, 2, "[n, k]");
  c.size("top_ids", top_ids, 0, n, "n (logprobs.size(0))");
  c.contiguous("top_ids", top_ids);
  c.dtype("top_values", top_values, {DType::kF32});
  c.same_shape("top_values", top_values, "top_ids", top_ids);
  c.contiguous("top_values", top_values);
  const int64_t k = top_ids.size(1);
  if (k > vocab) c.fail_with(str("top_ids ", top_ids.describe(), ": k = ", k, " exceeds the vocab ", vocab));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"tokens", &tokens}, {"chosen", &chosen},
                                {"top_ids", &top_ids}, {"top_values", &top_values}}) {
    c.same_device(logprobs, name, *t);
  }
  if (n == 0) return;
  const Device d = logprobs.device();
  if (d.is_cpu()) {
    for (int64_t r = 0; r < n; ++r) {
      const int32_t t = tokens.data<int32_t>()[r];
      if (t < 0 || t >= vocab) c.fail_with(str("row ", r, ": token ", t, " is outside [0, ", vocab, ")"));
    }
    cpu::top_logprobs(logprobs.data<float>(), n, vocab, row_stride(logprobs), tokens.data<int32_t>(), k,
                      chosen.data<float>(), top_ids.data<int32_t>(), top_values.data<float>());
  } else if (d.is_cuda()) {
#ifdef RADIXLM_WITH_CUDA
    cuda::top_logprobs(d.index, logprobs.data<float>(), n, vocab, row_stride(logprobs), tokens.data<int32_t>(), k,
                       chosen.data<float>(), top_ids.data<int32_t>(), top_values.data<float>());
#else
    c.not_built(d);
#endif
  } else {
    c.not_built(d);
  }
}

}  // namespace rlm::ops
