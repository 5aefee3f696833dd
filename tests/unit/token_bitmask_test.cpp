// Grammar masks on the logits (ops::apply_token_bitmask, CPU) against a plain per-token loop on
// fresh random inputs (odd vocab sizes, extra mask words, rows in any order), its input checks,
// and the Sampler with masks in a batch that mixes masked and free rows: a masked row only ever
// samples an allowed token (greedy: the best allowed one, found by a loop here), a free row
// samples what it samples without any mask in the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/check.h"
#include "engine/sampler.h"
#include "ops/sampling_ops.h"

namespace rlm {
namespace {

bool allowed(const std::vector<int32_t>& words, int64_t row, int64_t w, int64_t t) {
  return (static_cast<uint32_t>(words[row * w + t / 32]) >> (t % 32)) & 1u;
}

TEST(TokenBitmask, MatchesPerTokenLoop) {
  std::mt19937 rng(11);
  for (const int64_t vocab : {1, 31, 32, 33, 1000, 49159}) {
    for (const int64_t extra_words : {0, 3}) {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 9);
      const int64_t w = (vocab + 31) / 32 + extra_words;
      Tensor logits = Tensor::empty({n, vocab}, DType::kF32);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = normal(rng);
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const int64_t m = static_cast<int64_t>(rng() % (n + 1));
      std::vector<int32_t> rows(order.begin(), order.begin() + m);
      std::vector<int32_t> words(static_cast<size_t>(m * w));
      for (int32_t& x : words) x = static_cast<int32_t>(rng() & (rng() | rng()));  // about 3/8 of bits set
      const Tensor before = logits.clone();
      ops::apply_token_bitmask(logits, Tensor::from_vector(words, {m, w}), Tensor::from_vector(rows, {m}));
      for (int64_t r = 0; r < n; ++r) {
        const auto at = std::find(rows.begin(), rows.end(), static_cast<int32_t>(r));
        for (int64_t t = 0; t < vocab; ++t) {
          const float x = before.data<float>()[r * vocab + t], y = logits.data<float>()[r * vocab + t];
          if (at != rows.end() && !allowed(words, at - rows.begin(), w, t)) {
            EXPECT_TRUE(std::isinf(y) && y < 0) << "vocab " << vocab << " row " << r << " token " << t;
          } else {
            EXPECT_EQ(std::memcmp(&x, &y, sizeof(float)), 0) << "vocab " << vocab << " row " << r << " token " << t;
          }
        }
      }
    }
  }
}

TEST(TokenBitmask, RejectsBadInput) {
  Tensor logits = Tensor::zeros({3, 40}, DType::kF32);
  const Tensor two_words = Tensor::zeros({1, 2}, DType::kI32);
  auto expect_error = [&](const Tensor& mask, std::vector<int32_t> rows, const char* needle) {
    try {
      ops::apply_token_bitmask(logits, mask, Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}));
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(two_words, {3}, "outside [0, 3)");
  expect_error(two_words, {-1}, "outside [0, 3)");
  expect_error(Tensor::zeros({2, 2}, DType::kI32), {1, 1}, "twice");
  expect_error(Tensor::zeros({1, 1}, DType::kI32), {0}, "fewer than 40 bits");
  expect_error(Tensor::zeros({2, 2}, DType::kI32), {0}, "rows");
  expect_error(Tensor::zeros({4, 2}, DType::kI32), {0, 1, 2, 2}, "mask rows");
  expect_error(Tensor::zeros({1, 2}, DType::kF32), {0}, "bitmask");
}

TEST(TokenBitmask, SamplerMasksOnlyTheMaskedRows) {
  constexpr int64_t kVocab = 777, kRows = 6;
  const int64_t w = (kVocab + 31) / 32;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Sampler sampler{Tensor()};
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> raw(static_cast<size_t>(kRows * kVocab));
    for (float& v : raw) v = normal(rng);
    std::vector<SampleRow> rows(kRows);
    for (int64_t r = 0; r < kRows; ++r) {
      rows[r].sampling.temperature = r % 3 == 0 ? 0.0f : 1.0f;
      rows[r].sampling.top_k = r == 4 ? 50 : -1;
      rows[r].sampling.top_p = r == 5 ? 0.9f : 1.0f;
      rows[r].sampling.seed = static_cast<uint64_t>(trial * 100 + r);
    }
    // Rows 0, 2, 4, 5 masked (a handful of allowed tokens each, never the raw favourite); 1 and 3 free.
    TokenBitmask masks;
    masks.words_per_row = w;
    for (int32_t r : {0, 2, 4, 5}) {
      int32_t* words = masks.add_row(r);
      std::fill(words, words + w, 0);
      const int64_t favourite = std::max_element(raw.begin() + r * kVocab, raw.begin() + (r + 1) * kVocab) -
                                (raw.begin() + r * kVocab);
      for (int k = 0; k < 5; ++k) {
        const int64_t t = static_cast<int64_t>(rng() % kVocab);
        if (t != favourite) words[t / 32] |= static_cast<int32_t>(1u << (t % 32));
      }
      words[(favourite + 1) % kVocab / 32] |= static_cast<int32_t>(1u << ((favourite + 1) % kVocab % 32));
    }
    const std::vector<SampleResult> unmasked = sampler.sample(Tensor::from_vector(raw, {kRows, kVocab}), rows);
    const std::vector<SampleResult> got =
        Sampler::read(sampler.launch(Tensor::from_vector(raw, {kRows, kVocab}), rows, &masks));
    for (int64_t r = 0; r < kRows; ++r) {
      const auto at = std::find(masks.rows.begin(), masks.rows.end(), static_cast<int32_t>(r));
      if (at == masks.rows.end()) {
        EXPECT_EQ(got[r].token, unmasked[r].token) << "free row " << r << " changed by the other rows' masks";
        continue;
      }
      const int64_t j = at - masks.rows.begin();
      EXPECT_TRUE(allowed(masks.words, j, w, got[r].token)) << "row " << r << " sampled masked token " << got[r].token;
      if (rows[r].sampling.temperature == 0.0f) {
        int64_t best = -1;
        for (int64_t t = 0; t < kVocab; ++t) {
          if (allowed(masks.words, j, w, t) && (best < 0 || raw[r * kVocab + t] > raw[r * kVocab + best])) best = t;
        }
        EXPECT_EQ(got[r].token, best) << "greedy row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace rlm
