// ops::apply_penalties and ops::top_logprobs on the CPU against straightforward references
// written here: per-vocab seen/count tables for the penalties (the arithmetic of the old host
// path), a stable full sort for the top-k. Fresh random inputs each run (seed in the failures).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "ops/ops.h"
#include "ops/sampling_ops.h"
#include "unit/ops_test_util.h"

#include "unit/no_fp_contract.h"  // the references round like the kernels

namespace rlm {
namespace {

using testing::TestRng;
using testing::error_of;

struct RefRow {
  ops::PenaltyRow p;
  std::vector<int32_t> prompt, output;
  ops::LogitBias bias;
};

// The reference: HF repetition penalty over prompt + output (+ the pending token), then
// frequency * count + presence over the output tokens.
void reference_penalties(float* x, int64_t vocab, const RefRow& r, const std::vector<int32_t>& table) {
  std::vector<bool> seen(vocab, false);
  std::vector<int32_t> count(vocab, 0);
  for (int32_t t : r.prompt) seen[t] = true;
  std::vector<int32_t> output = r.output;
  if (r.p.pending_slot >= 0) {
    const int32_t t = table[r.p.pending_slot];
    if (t >= 0 && t < vocab) output.push_back(t);  // out of range: skipped (documented)
  }
  for (int32_t t : output) {
    seen[t] = true;
    ++count[t];
  }
  const ops::PenaltyRow& p = r.p;
  for (int64_t t = 0; t < vocab; ++t) {
    if (seen[t] && p.repetition != 1.0f) {
      x[t] = x[t] > 0 ? x[t] / p.repetition : x[t] * p.repetition;
    }
    if (count[t] > 0 && (p.frequency != 0.0f || p.presence != 0.0f)) {
      x[t] -= p.frequency * static_cast<float>(count[t]) + p.presence;
    }
  }
  for (const auto& [t, b] : r.bias) x[t] += b;  // logit_bias, after the penalties
}

std::vector<int32_t> random_tokens(TestRng& rng, int64_t len, int64_t lo, int64_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(len));
  for (auto& t : v) t = static_cast<int32_t>(rng.randint(lo, hi));
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(SamplingOps, PenaltiesMatchReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t vocab : {1, 7, 50, 301}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int64_t n = 12, pad = 5;
    std::vector<int32_t> table = random_tokens(rng, 16, 0, vocab - 1);
    table[3] = -1;                              // a slot whose token is out of range: skipped
    table[4] = static_cast<int32_t>(vocab) + 2;
    const Tensor table_t = Tensor::from_vector(table);
    std::vector<RefRow> rows(n);
    ops::PenaltyBatch batch;
    for (int64_t r = 0; r < n; ++r) {
      RefRow& row = rows[r];
      // Tokens from a narrow range so that many repeat; rows 0 and 1 are left without penalties.
      const int64_t hi = std::min<int64_t>(vocab - 1, rng.randint(0, 12));
      row.prompt = random_tokens(rng, rng.randint(0, 30), 0, hi);
      row.output = random_tokens(rng, rng.randint(0, 30), 0, hi);
      if (r >= 2) {
        const int64_t kind = r % 5;  // 0..3: one penalty or all; 4: all three
        if (kind == 0 || kind >= 3) row.p.repetition = static_cast<float>(rng.uniform(0.3, 2.0));
        if (kind == 1 || kind >= 3) row.p.frequency = static_cast<float>(rng.uniform(-2.0, 2.0));
        if (kind == 2 || kind == 4) row.p.presence = static_cast<float>(rng.uniform(-2.0, 2.0));
      }
      if (r % 3 == 0) row.p.pending_slot = static_cast<int32_t>(rng.randint(0, 15));
      if (r == 5) row.p.pending_slot = 3;
      if (r == 8) row.p.pending_slot = 4;
      // logit_bias on every third row (alone on row 0, with penalties elsewhere): distinct ids.
      if (r % 3 == 0) {
        std::vector<int32_t> ids(static_cast<size_t>(vocab));
        std::iota(ids.begin(), ids.end(), 0);
        for (int64_t i = static_cast<int64_t>(ids.size()) - 1; i > 0; --i) std::swap(ids[i], ids[rng.randint(0, i)]);
        ids.resize(static_cast<size_t>(rng.randint(1, std::min<int64_t>(vocab, 9))));
        for (int32_t t : ids) row.bias.emplace_back(t, static_cast<float>(rng.uniform(-100.0, 100.0)));
      }
      batch.add_row(row.p, row.prompt, row.output, row.bias);
      row.p.prompt_len = static_cast<int32_t>(row.prompt.size());
    }
    // A strided view (row stride vocab + pad) whose padding must stay untouched.
    Tensor full = testing::random_normal(rng, {n, vocab + pad}, 3.0f);
    for (int64_t r = 0; r < n; ++r) full.data<float>()[r * (vocab + pad)] = 0.0f;  // x > 0 is false at 0
    const Tensor want = full.clone();
    for (int64_t r = 0; r < n; ++r) reference_penalties(want.data<float>() + r * (vocab + pad), vocab, rows[r], table);
    ops::apply_penalties(full.slice(1, 0, vocab), batch, table_t);
    for (int64_t i = 0; i < full.numel(); ++i) {
      ASSERT_TRUE(same_bits(full.data<float>()[i], want.data<float>()[i]))
          << "row " << i / (vocab + pad) << " column " << i % (vocab + pad) << ": got " << full.data<float>()[i]
          << ", want " << want.data<float>()[i];
    }
  }
}

TEST(SamplingOps, PenaltiesRejectBadInput) {
  const Tensor logits = Tensor::zeros({3, 10}, DType::kF32);
  const Tensor table = Tensor::from_vector(std::vector<int32_t>{1, 2});
  ops::PenaltyRow on;
  on.presence = 0.5f;
  auto batch_with = [&](const std::vector<int32_t>& third_output) {
    ops::PenaltyBatch b;
    b.add_row(on, {1, 2}, {3});
    b.add_row(on, {}, {});
    b.add_row(on, {4}, third_output);
    return b;
  };
  std::string msg = error_of([&] { ops::apply_penalties(logits, batch_with({5, 10}), table); });
  EXPECT_NE(msg.find("row 2: token id 10"), std::string::npos) << msg;
  msg = error_of([&] { ops::apply_penalties(logits, batch_with({-1}), table); });
  EXPECT_NE(msg.find("row 2: token id -1"), std::string::npos) << msg;
  // A row without any penalty is still checked.
  ops::PenaltyBatch off;
  off.add_row({}, {}, {});
  off.add_row({}, {99}, {});
  off.add_row({}, {}, {});
  msg = error_of([&] { ops::apply_penalties(logits, off, table); });
  EXPECT_NE(msg.find("row 1: token id 99"), std::string::npos) << msg;
  ops::PenaltyBatch bad = batch_with({5});
  bad.rows[1].pending_slot = 2;
  msg = error_of([&] { ops::apply_penalties(logits, bad, table); });
  EXPECT_NE(msg.find("row 1: pending_slot 2 outside"), std::string::npos) << msg;
  msg = error_of([&] { ops::apply_penalties(logits, bad, Tensor()); });
  EXPECT_NE(msg.find("row 1: pending_slot 2 but no future_tokens"), std::string::npos) << msg;
  bad = batch_with({5});
  bad.rows[0].prompt_len = 4;
  msg = error_of([&] { ops::apply_penalties(logits, bad, table); });
  EXPECT_NE(msg.find("row 0: prompt_len 4"), std::string::npos) << msg;
  bad = batch_with({5});
  bad.rows[2].repetition = 0.0f;
  msg = error_of([&] { ops::apply_penalties(logits, bad, table); });
  EXPECT_NE(msg.find("row 2: bad penalties"), std::string::npos) << msg;
  bad = batch_with({5});
  bad.rows.pop_back();
  msg = error_of([&] { ops::apply_penalties(logits, bad, table); });
  EXPECT_NE(msg.find("2 penalty rows for 3 logits rows"), std::string::npos) << msg;
  bad = batch_with({5});
  bad.token_offsets[3] = 2;
  msg = error_of([&] { ops::apply_penalties(logits, bad, table); });
  EXPECT_NE(msg.find("token_offsets"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] { ops::apply_penalties(logits, batch_with({9, 9}), table); }), "");
  // logit_bias entries: ids inside the vocab and distinct per row, finite values.
  for (const auto& [bias, needle] : std::vector<std::pair<ops::LogitBias, std::string>>{
           {{{10, 1.0f}}, "row 1: logit_bias token id 10"},
           {{{-1, 1.0f}}, "row 1: logit_bias token id -1"},
           {{{3, 1.0f}, {3, 2.0f}}, "row 1: logit_bias lists token 3 twice"},
           {{{3, std::numeric_limits<float>::infinity()}}, "row 1: logit_bias value inf"}}) {
    ops::PenaltyBatch b;
    b.add_row(on, {1}, {});
    b.add_row({}, {}, {}, bias);
    b.add_row(on, {}, {}, {{0, 1.0f}, {9, -1.0f}});
    msg = error_of([&] { ops::apply_penalties(logits, b, table); });
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  bad = batch_with({5});
  bad.bias_offsets.pop_back();
  msg = error_of([&] { ops::apply_penalties(logits, bad, table); });
  EXPECT_NE(msg.find("bias_offsets"), std::string::npos) << msg;
}

// The reference order: a stable sort of the ids 0..vocab-1 by value, larger first, NaN last, so
// that equal values keep the lower id first.
std::vector<int32_t> reference_order(const float* x, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [x](int32_t a, int32_t b) {
    if (std::isnan(x[a]) || std::isnan(x[b])) return !std::isnan(x[a]) && std::isnan(x[b]);
    return x[a] > x[b];
  });
  return ids;
}

TEST(SamplingOps, TopLogprobsMatchReference) {
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t vocab : {1, 5, 257}) {
    const int64_t n = 6;
    Tensor lp = testing::random_normal(rng, {n, vocab}, 2.0f);
    ops::log_softmax(lp);
    float* x = lp.data<float>();
    // Planted ties: copies of the row's best value and of random values, +0/-0, and NaNs in row 5.
    for (int64_t r = 0; r < n && vocab > 1; ++r) {
      float* row = x + r * vocab;
      const int64_t best = std::max_element(row, row + vocab) - row;
      for (int q = 0; q < 3; ++q) row[rng.randint(0, vocab - 1)] = row[best];
      for (int q = 0; q < 3; ++q) row[rng.randint(0, vocab - 1)] = row[rng.randint(0, vocab - 1)];
      if (r == 4) {
        row[0] = -0.0f;
        row[vocab - 1] = 0.0f;
      }
      if (r == 5) {
        row[1] = std::numeric_limits<float>::quiet_NaN();
        row[vocab - 1] = std::numeric_limits<float>::quiet_NaN();
      }
    }
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (auto& t : tokens) t = static_cast<int32_t>(rng.randint(0, vocab - 1));
    const Tensor tokens_t = Tensor::from_vector(tokens);
    for (int64_t k : {int64_t{0}, int64_t{1}, std::min<int64_t>(5, vocab), vocab}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + ", k " + std::to_string(k));
      Tensor chosen = Tensor::empty({n}, DType::kF32);
      Tensor ids = Tensor::empty({n, k}, DType::kI32);
      Tensor values = Tensor::empty({n, k}, DType::kF32);
      testing::poison(chosen);
      testing::poison(values);
      if (k > 0) ids.fill_(-7);
      ops::top_logprobs(lp, tokens_t, chosen, ids, values);
      for (int64_t r = 0; r < n; ++r) {
        const float* row = x + r * vocab;
        EXPECT_TRUE(same_bits(chosen.data<float>()[r], row[tokens[r]])) << "row " << r;
        const std::vector<int32_t> order = reference_order(row, vocab);
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(ids.data<int32_t>()[r * k + i], order[i]) << "row " << r << " rank " << i;
          ASSERT_TRUE(same_bits(values.data<float>()[r * k + i], row[order[i]])) << "row " << r << " rank " << i;
        }
      }
    }
  }
}

TEST(SamplingOps, TopLogprobsRejectBadInput) {
  const Tensor lp = Tensor::zeros({3, 4}, DType::kF32);
  const Tensor chosen = Tensor::empty({3}, DType::kF32);
  const Tensor ids = Tensor::empty({3, 2}, DType::kI32), values = Tensor::empty({3, 2}, DType::kF32);
  std::string msg =
      error_of([&] { ops::top_logprobs(lp, Tensor::from_vector(std::vector<int32_t>{0, 3, 4}), chosen, ids, values); });
  EXPECT_NE(msg.find("row 2: token 4 is outside [0, 4)"), std::string::npos) << msg;
  msg = error_of([&] { ops::top_logprobs(lp, Tensor::from_vector(std::vector<int32_t>{-1, 0, 0}), chosen, ids, values); });
  EXPECT_NE(msg.find("row 0: token -1"), std::string::npos) << msg;
  const Tensor tokens = Tensor::from_vector(std::vector<int32_t>{0, 1, 2});
  msg = error_of([&] {
    ops::top_logprobs(lp, tokens, chosen, Tensor::empty({3, 5}, DType::kI32), Tensor::empty({3, 5}, DType::kF32));
  });
  EXPECT_NE(msg.find("k = 5 exceeds the vocab 4"), std::string::npos) << msg;
  msg = error_of([&] { ops::top_logprobs(lp, tokens, chosen, ids, Tensor::empty({3, 3}, DType::kF32)); });
  EXPECT_NE(msg.find("top_values"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] { ops::top_logprobs(lp, tokens, chosen, ids, values); }), "");
}

}  // namespace
}  // namespace rlm
