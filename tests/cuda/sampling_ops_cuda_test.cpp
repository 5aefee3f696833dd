// ops::apply_penalties (with logit_bias) and ops::top_logprobs on CUDA against their CPU twins on fresh random inputs
// (odd vocab sizes, 1 to 120 rows, k from 0 to 64). Tolerances: penalties bit-identical (both
// twins round once per operation); top_logprobs on the same log-softmaxed input bit-identical
// (ids, values, chosen logprob); the whole logprob path (log_softmax on each device, then
// top_logprobs) within 1e-5 absolute on the chosen logprob and on the k-th best value of every
// rank. Output buffers start poisoned (NaN, ids -1). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cuda/cuda_test_util.h"
#include "ops/ops.h"
#include "ops/sampling_ops.h"

namespace rlm {
namespace {

using testing::poisoned;
using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

std::vector<int32_t> random_tokens(TestRng& rng, int64_t len, int64_t lo, int64_t hi) {
  std::vector<int32_t> v(static_cast<size_t>(len));
  for (auto& t : v) t = static_cast<int32_t>(rng.randint(lo, hi));
  return v;
}

// The first position where two CPU f32 tensors of one shape differ in bits, or -1.
int64_t first_bit_difference(const Tensor& a, const Tensor& b) {
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(a.data<float>() + i, b.data<float>() + i, sizeof(float)) != 0) return i;
  }
  return -1;
}

// n rows with a mix: no penalty, each penalty alone, all three; short and long lists, tokens from
// a narrow range (many repeats) or the whole vocab; pending slots, some pointing at out-of-range
// table tokens (skipped by both twins).
ops::PenaltyBatch random_batch(TestRng& rng, int64_t n, int64_t vocab, int64_t max_len) {
  ops::PenaltyBatch b;
  for (int64_t r = 0; r < n; ++r) {
    ops::PenaltyRow p;
    const int64_t kind = rng.randint(0, 5);
    if (kind == 1 || kind == 4 || kind == 5) p.repetition = static_cast<float>(rng.uniform(0.2, 2.0));
    if (kind == 2 || kind >= 4) p.frequency = static_cast<float>(rng.uniform(-2.0, 2.0));
    if (kind == 3 || kind >= 4) p.presence = static_cast<float>(rng.uniform(-2.0, 2.0));
    if (rng.randint(0, 2) == 0) p.pending_slot = static_cast<int32_t>(rng.randint(0, 15));
    const int64_t hi = rng.randint(0, 1) == 0 ? std::min<int64_t>(vocab - 1, 40) : vocab - 1;
    // logit_bias on about a third of the rows (with or without penalties): distinct ids.
    ops::LogitBias bias;
    if (rng.randint(0, 2) == 0) {
      const int64_t count = rng.randint(1, std::min<int64_t>(vocab, 300));
      for (int64_t i = 0; i < count; ++i) {
        const int32_t t = static_cast<int32_t>(i * (vocab / count) + rng.randint(0, vocab / count - 1));
        bias.emplace_back(t, static_cast<float>(rng.uniform(-100.0, 100.0)));
      }
    }
    b.add_row(p, random_tokens(rng, rng.randint(0, max_len), 0, hi), random_tokens(rng, rng.randint(0, max_len), 0, hi),
              bias);
  }
  return b;
}

TEST(SamplingOpsCuda, PenaltiesBitIdenticalToCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  struct Case {
    int64_t vocab, n, max_len;
  };
  // n = 120 at vocab 151937 needs two launches (the counts scratch holds ~110 such rows).
  for (const Case c : {Case{151937, 1, 3000}, Case{151937, 7, 500}, Case{151937, 33, 200}, Case{151937, 120, 50},
                       Case{1000, 1, 50}, Case{1000, 7, 3000}, Case{1000, 33, 100}}) {
    SCOPED_TRACE("vocab " + std::to_string(c.vocab) + ", n " + std::to_string(c.n));
    std::vector<int32_t> table = random_tokens(rng, 16, 0, c.vocab - 1);
    table[2] = -5;
    table[7] = static_cast<int32_t>(c.vocab);
    const ops::PenaltyBatch batch = random_batch(rng, c.n, c.vocab, c.max_len);
    const int64_t pad = 3;  // row stride vocab + 3: the padding must stay untouched
    Tensor cpu = random_normal(rng, {c.n, c.vocab + pad}, 4.0f);
    for (int64_t r = 0; r < c.n; ++r) cpu.data<float>()[r * (c.vocab + pad) + r % c.vocab] = 0.0f;
    Tensor gpu = to_gpu(cpu);
    ops::apply_penalties(cpu.slice(1, 0, c.vocab), batch, Tensor::from_vector(table));
    ops::apply_penalties(gpu.slice(1, 0, c.vocab), batch, to_gpu(Tensor::from_vector(table)));
    const Tensor got = to_cpu(gpu);
    const int64_t at = first_bit_difference(got, cpu);
    EXPECT_EQ(at, -1) << "row " << at / (c.vocab + pad) << " column " << at % (c.vocab + pad) << ": got "
                      << got.data<float>()[std::max<int64_t>(at, 0)] << ", want "
                      << cpu.data<float>()[std::max<int64_t>(at, 0)];
  }
}

// Log-softmaxed rows with planted ties (copies of the best value and of random values), +0/-0,
// and NaNs in the last row.
Tensor logprobs_with_ties(TestRng& rng, int64_t n, int64_t vocab) {
  Tensor lp = random_normal(rng, {n, vocab}, 3.0f);
  ops::log_softmax(lp);
  for (int64_t r = 0; r < n; ++r) {
    float* row = lp.data<float>() + r * vocab;
    const int64_t best = std::max_element(row, row + vocab) - row;
    for (int q = 0; q < 4; ++q) row[rng.randint(0, vocab - 1)] = row[best];
    for (int q = 0; q < 40; ++q) row[rng.randint(0, vocab - 1)] = row[rng.randint(0, vocab - 1)];
    row[rng.randint(0, vocab - 1)] = -0.0f;
    row[rng.randint(0, vocab - 1)] = 0.0f;
    if (r == n - 1 && n > 1) {
      for (int q = 0; q < 3; ++q) row[rng.randint(0, vocab - 1)] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  return lp;
}

struct TopResult {
  Tensor chosen, ids, values;  // CPU copies
};

TopResult run_top(const Tensor& lp, const Tensor& tokens, int64_t k) {
  const Device d = lp.device();
  const int64_t n = lp.size(0);
  TopResult out;
  Tensor chosen = poisoned({n}, DType::kF32).to(d);
  Tensor ids = poisoned({n, k}, DType::kI32).to(d);
  Tensor values = poisoned({n, k}, DType::kF32).to(d);
  ops::top_logprobs(lp, tokens, chosen, ids, values);
  return {to_cpu(chosen), to_cpu(ids), to_cpu(values)};
}

TEST(SamplingOpsCuda, TopLogprobsBitIdenticalToCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (int64_t vocab : {151937, 1000}) {
    for (int64_t n : {1, 7, 33}) {
      const Tensor lp = logprobs_with_ties(rng, n, vocab);
      const Tensor tokens = Tensor::from_vector(random_tokens(rng, n, 0, vocab - 1));
      const Tensor lp_gpu = to_gpu(lp), tokens_gpu = to_gpu(tokens);
      for (int64_t k : {0, 1, 5, 20, 64}) {
        SCOPED_TRACE("vocab " + std::to_string(vocab) + ", n " + std::to_string(n) + ", k " + std::to_string(k));
        const TopResult want = run_top(lp, tokens, k);
        const TopResult got = run_top(lp_gpu, tokens_gpu, k);
        EXPECT_EQ(first_bit_difference(got.chosen, want.chosen), -1);
        EXPECT_EQ(testing::int_values(got.ids), testing::int_values(want.ids));
        EXPECT_EQ(first_bit_difference(got.values, want.values), -1);
        for (int64_t i = 0; i < want.values.numel(); ++i) {
          // Only the NaN row may hold NaN values (the poison was overwritten everywhere).
          if (std::isnan(want.values.data<float>()[i])) {
            ASSERT_EQ(i / std::max<int64_t>(k, 1), n - 1);
          }
        }
      }
    }
  }
}

TEST(SamplingOpsCuda, OutOfRangeTokenGivesNanOnTheDevice) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  const Tensor lp = to_gpu(logprobs_with_ties(rng, 3, 1000));
  const Tensor tokens = to_gpu(Tensor::from_vector(std::vector<int32_t>{5, 1000, -1}));
  const TopResult got = run_top(lp, tokens, 2);
  EXPECT_FALSE(std::isnan(got.chosen.data<float>()[0]));
  EXPECT_TRUE(std::isnan(got.chosen.data<float>()[1]));
  EXPECT_TRUE(std::isnan(got.chosen.data<float>()[2]));
}

// The device path the executor runs (log_softmax, then top_logprobs, both on the GPU) against the
// CPU path: within 1e-5 absolute (log_softmax sums in a different order on each device).
TEST(SamplingOpsCuda, LogprobPathWithinToleranceOfCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  constexpr double kTol = 1e-5;
  for (int64_t vocab : {151937, 1000}) {
    for (int64_t n : {1, 7, 33}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + ", n " + std::to_string(n));
      const Tensor logits = random_normal(rng, {n, vocab}, 3.0f);
      const Tensor tokens = Tensor::from_vector(random_tokens(rng, n, 0, vocab - 1));
      Tensor lp_cpu = logits.clone();
      ops::log_softmax(lp_cpu);
      Tensor lp_gpu = to_gpu(logits);
      ops::log_softmax(lp_gpu);
      const int64_t k = 20;
      const TopResult want = run_top(lp_cpu, tokens, k);
      const TopResult got = run_top(lp_gpu, to_gpu(tokens), k);
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_NEAR(got.chosen.data<float>()[r], want.chosen.data<float>()[r], kTol) << "row " << r;
        for (int64_t i = 0; i < k; ++i) {
          // The i-th best value moves by at most the largest elementwise difference.
          EXPECT_NEAR(got.values.data<float>()[r * k + i], want.values.data<float>()[r * k + i], kTol)
              << "row " << r << " rank " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rlm
