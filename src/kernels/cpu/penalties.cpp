#include "kernels/cpu/penalties.h"

#include <algorithm>
#include <utility>
#include <vector>

// The CUDA twin rounds after every operation (__fmul_rn, __fadd_rn, ...); GCC may otherwise fuse
// `frequency * count + presence` into an FMA on targets that have one (-ffp-contract=fast is its
// default), so contraction is off for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#elif defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace rlm::cpu {

namespace {

void add_logit_bias(float* x, const LogitBiasList& bias, int64_t r) {
  if (bias.ids == nullptr) return;
  for (int32_t j = bias.offsets[r]; j < bias.offsets[r + 1]; ++j) x[bias.ids[j]] = x[bias.ids[j]] + bias.values[j];
}

}  // namespace

float penalize_logit(float x, bool seen, int32_t count, const PenaltyRow& p) {
  if (seen && p.repetition != 1.0f) x = x > 0.0f ? x / p.repetition : x * p.repetition;
  if (count > 0 && (p.frequency != 0.0f || p.presence != 0.0f)) {
    const float scaled = p.frequency * static_cast<float>(count);
    const float penalty = scaled + p.presence;
    x = x - penalty;
  }
  return x;
}

void apply_penalties(float* logits, int64_t n, int64_t vocab, int64_t ld, const int32_t* token_ids,
                     const int32_t* offsets, const PenaltyRow* rows, const int32_t* table,
                     const LogitBiasList& bias) {
  std::vector<std::pair<int32_t, bool>> tokens;  // (token, is an output token), sorted by token
  for (int64_t r = 0; r < n; ++r) {
    const PenaltyRow& p = rows[r];
    float* x = logits + r * ld;
    if (!penalty_row_active(p)) {
      add_logit_bias(x, bias, r);
      continue;
    }
    const int32_t begin = offsets[r], end = offsets[r + 1];
    tokens.clear();
    for (int32_t j = begin; j < end; ++j) tokens.emplace_back(token_ids[j], j - begin >= p.prompt_len);
    if (p.pending_slot >= 0) {
      const int32_t t = table[p.pending_slot];
      if (t >= 0 && t < vocab) tokens.emplace_back(t, true);
    }
    std::sort(tokens.begin(), tokens.end());
    for (size_t i = 0; i < tokens.size();) {
      const int32_t t = tokens[i].first;
      int32_t count = 0;
      for (; i < tokens.size() && tokens[i].first == t; ++i) count += tokens[i].second ? 1 : 0;
      x[t] = penalize_logit(x[t], /*seen=*/true, count, p);
    }
    add_logit_bias(x, bias, r);
  }
}

}  // namespace rlm::cpu
