// CPU kernel of ops::apply_penalties (also the reference for the CUDA twin): repetition penalty
// (Hugging Face semantics, once per distinct prompt or output token), then frequency and presence
// penalties (OpenAI semantics, over output tokens), then OpenAI's logit_bias (a value added to the
// logits of listed tokens), in place on rows of f32 logits.
#pragma once

#include <cstdint>

namespace rlm::cpu {

// One row's settings; PenaltyRow is plain data shared with the CUDA twin.
struct PenaltyRow {
  float repetition = 1.0f;   // > 0; 1: off
  float frequency = 0.0f;    // 0: off
  float presence = 0.0f;     // 0: off
  int32_t prompt_len = 0;    // the first prompt_len tokens of the row's list are prompt tokens
  int32_t pending_slot = -1; // >= 0: table[pending_slot] is one more output token; -1: none
};

// True when the row changes any logit (some penalty is on).
inline bool penalty_row_active(const PenaltyRow& p) {
  return p.repetition != 1.0f || p.frequency != 0.0f || p.presence != 0.0f;
}

// The value of one logit x after the penalties, for a token seen (in prompt or output) or not and
// found `count` times among the output tokens. Every operation rounds once (the CUDA twin uses the
// same _rn intrinsics; see penalties.cpp for how contraction into FMA is kept out), so both agree
// bit for bit:
//   seen && repetition != 1:               x = x > 0 ? x / repetition : x * repetition
//   count > 0 && (frequency || presence):  x = x - (frequency * float(count) + presence)
float penalize_logit(float x, bool seen, int32_t count, const PenaltyRow& p);

// Each row's logit_bias in CSR layout: row r adds values[j] to the logit of ids[j] for j in
// [offsets[r], offsets[r + 1]); ids distinct within a row, inside [0, vocab), values finite (the
// caller validates). Plain data shared with the CUDA twin; ids == nullptr: no row has a bias.
struct LogitBiasList {
  const int32_t* ids = nullptr;
  const float* values = nullptr;
  const int32_t* offsets = nullptr;  // [n + 1]
};

// logits: f32 [n, vocab] (row stride ld), modified in place. Row r's tokens are
// token_ids[offsets[r] .. offsets[r + 1]) (offsets: [n + 1]); rows: [n]. table: the pending-token
// table (may be null when no row has a pending slot). Token ids and pending slots were validated
// by the caller (ops::apply_penalties); a table token outside [0, vocab) is skipped (like the CUDA
// twin, which cannot validate it on the host). Repeated tokens are counted, never penalised twice
// by the repetition penalty. The bias is added after the penalties (one rounding: x + value).
void apply_penalties(float* logits, int64_t n, int64_t vocab, int64_t ld, const int32_t* token_ids,
                     const int32_t* offsets, const PenaltyRow* rows, const int32_t* table,
                     const LogitBiasList& bias = {});

}  // namespace rlm::cpu
