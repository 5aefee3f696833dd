// Tensor-parallel shards against the whole model's layers: column- and row-parallel projections,
// replicated heads, the vocab-parallel embedding and LM head (ranks as threads over loopback TCP),
// and the split rules' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/tensor_parallel.h"
#include "unit/tp_test_util.h"

namespace rlm {
namespace {

constexpr float kTol = 1e-5f;  // f32: the same dot products, partial sums added in another order

Tensor random_input(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(m * k));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v).view({m, k});
}

std::unique_ptr<WeightSource> weights_for(const TpShard& tp, std::optional<DType> matrix_dtype = std::nullopt) {
  auto ws = make_dummy_weights(DType::kF32, 7, 0.5f, matrix_dtype);
  ws->load_options.tp = tp;
  return ws;
}

float max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const Tensor x = a.contiguous(), y = b.contiguous();
  float d = 0.0f;
  for (int64_t i = 0; i < x.numel(); ++i) d = std::max(d, std::abs(x.data<float>()[i] - y.data<float>()[i]));
  return d;
}

// The value of a call that must succeed.
template <typename T>
T ok(StatusOr<T> s) {
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return std::move(s).value();
}

Tensor run_linear(const Linear& l, const Tensor& x) {
  Tensor out = Tensor::empty({x.size(0), l.out_features()}, DType::kF32);
  apply_linear(l, x, out);
  return out;
}

TEST(TpShard, HeadsSplitOrReplicate) {
  auto split = shard_heads(8, {1, 2, nullptr}, "heads");
  ASSERT_TRUE(split.is_ok());
  EXPECT_EQ(split->first, 4);
  EXPECT_EQ(split->count, 4);
  EXPECT_TRUE(split->replica_leader);
  auto rep = shard_heads(2, {3, 4, nullptr}, "heads");  // ranks 2, 3 hold head 1; rank 2 leads
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->first, 1);
  EXPECT_EQ(rep->count, 1);
  EXPECT_FALSE(rep->replica_leader);
  EXPECT_TRUE(shard_heads(2, {2, 4, nullptr}, "heads")->replica_leader);
  auto bad = shard_heads(3, {0, 2, nullptr}, "attention heads");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("3 attention heads"), std::string::npos);
  EXPECT_FALSE(shard_size(100, {0, 3, nullptr}, "intermediate_size").is_ok());
}

// An MLP (gate_up column-parallel, down row-parallel + all-reduce) equals the unsharded one.
class ShardedMlp : public ::testing::TestWithParam<int> {};

TEST_P(ShardedMlp, MatchesUnsharded) {
  const int size = GetParam();
  const int64_t hidden = 64, inter = 96, m = 5;
  const Tensor x = random_input(m, hidden, 1);
  auto ws = weights_for({});
  const Linear gu = ok(load_gate_up_parallel(*ws, "mlp", inter, inter, hidden, true));
  const Linear down = ok(load_row_parallel(*ws, "mlp.down_proj", hidden, inter, 0, inter, true));
  const Tensor h = run_linear(gu, x);
  const Tensor want = run_linear(down, h.slice(1, 0, inter).contiguous());
  std::vector<Tensor> got(static_cast<size_t>(size));
  testing::run_ranks(size, [&](int rank, Communicator& comm) {
    auto rws = weights_for({rank, size, &comm});
    const int64_t local = inter / size;
    auto rgu = load_gate_up_parallel(*rws, "mlp", inter, local, hidden, true);
    auto rdown = load_row_parallel(*rws, "mlp.down_proj", hidden, inter, rank * local, local, true);
    ASSERT_TRUE(rgu.is_ok() && rdown.is_ok());
    const Tensor hl = run_linear(*rgu, x);  // [m, 2 * local]: this rank's gate rows, then its up rows
    EXPECT_LE(max_diff(hl.slice(1, 0, local), h.slice(1, rank * local, (rank + 1) * local)), kTol);
    EXPECT_LE(max_diff(hl.slice(1, local, 2 * local), h.slice(1, inter + rank * local, inter + (rank + 1) * local)),
              kTol);
    Tensor y = run_linear(*rdown, hl.slice(1, 0, local).contiguous());
    tp_all_reduce({rank, size, &comm}, y);
    got[rank] = y;
  });
  for (int r = 0; r < size; ++r) EXPECT_LE(max_diff(got[r], want), kTol) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShardedMlp, ::testing::Values(2, 3, 4));

// QKV with fewer heads than ranks: each rank holds one q head and one KV head; the o_proj output
// of the replicas past the first is zero, so the all-reduce counts each head once.
TEST(ShardedAttentionProjections, ReplicatedHeadsCountOnce) {
  const int size = 4;
  const int64_t hidden = 32, d = 8, hq = 2, hk = 1, m = 3;
  const Tensor x = random_input(m, hidden, 2);
  const Tensor attn = random_input(m, hq * d, 3);  // stands for the attention output
  auto ws = weights_for({});
  const Linear qkv = ok(load_qkv_parallel(*ws, "attn", hq, hk, {0, hq, true}, {0, hk, true}, d, hidden, true));
  const Linear o = ok(load_row_parallel(*ws, "attn.o_proj", hidden, hq * d, 0, hq * d, false));
  const Tensor qkv_full = run_linear(qkv, x), want = run_linear(o, attn);
  std::vector<Tensor> got(size);
  testing::run_ranks(size, [&](int rank, Communicator& comm) {
    const TpShard tp{rank, size, &comm};
    auto rws = weights_for(tp);
    const HeadShard q = ok(shard_heads(hq, tp, "q")), kv = ok(shard_heads(hk, tp, "kv"));
    const Linear rqkv = ok(load_qkv_parallel(*rws, "attn", hq, hk, q, kv, d, hidden, true));
    const Tensor local = run_linear(rqkv, x);  // [m, (1 + 2) * d]
    EXPECT_LE(max_diff(local.slice(1, 0, d), qkv_full.slice(1, q.first * d, (q.first + 1) * d)), kTol);
    EXPECT_LE(max_diff(local.slice(1, d, 3 * d), qkv_full.slice(1, hq * d, (hq + 2 * hk) * d)), kTol);
    const Linear ro = ok(load_row_parallel(*rws, "attn.o_proj", hidden, hq * d, q.first * d, d, false, q.replica_leader));
    Tensor y = run_linear(ro, attn.slice(1, q.first * d, (q.first + 1) * d).contiguous());
    tp_all_reduce(tp, y);
    got[rank] = y;
  });
  for (int r = 0; r < size; ++r) EXPECT_LE(max_diff(got[r], want), kTol) << "rank " << r;
}

// The vocab-parallel embedding and LM head, with a vocabulary that does not divide by the ranks.
TEST(VocabParallel, EmbeddingAndLmHeadMatchUnsharded) {
  const int size = 4;
  const int64_t vocab = 37, hidden = 16;
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{0, 9, 10, 36, 27, 5});
  auto ws = weights_for({});
  const Tensor table = ok(load_vocab_parallel(*ws, "embed", vocab, hidden));
  Tensor want_emb = Tensor::empty({ids.numel(), hidden}, DType::kF32);
  tp_embedding({}, ids, table, vocab, want_emb);
  const Tensor want_logits = tp_lm_head({}, want_emb, table, vocab);
  std::vector<Tensor> emb(size), logits(size);
  testing::run_ranks(size, [&](int rank, Communicator& comm) {
    const TpShard tp{rank, size, &comm};
    auto rws = weights_for(tp);
    const Tensor shard = ok(load_vocab_parallel(*rws, "embed", vocab, hidden));
    EXPECT_EQ(shard.size(0), shard_vocab(vocab, tp).rows());
    emb[rank] = Tensor::empty({ids.numel(), hidden}, DType::kF32);
    tp_embedding(tp, ids, shard, vocab, emb[rank]);
    logits[rank] = tp_lm_head(tp, emb[rank], shard, vocab);
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(max_diff(emb[r], want_emb), 0.0f) << "rank " << r;  // one nonzero row per token: exact
    EXPECT_LE(max_diff(logits[r], want_logits), kTol) << "rank " << r;
  }
}

// Block-quantized weights split along whole blocks, and say so when they cannot.
TEST(QuantizedShards, RowParallelSplitsWholeBlocks) {
  const int64_t hidden = 32, in = 128, m = 2;
  const Tensor x = random_input(m, in, 4);
  auto ws = weights_for({}, DType::kQ8_0);
  const Linear full = ok(load_row_parallel(*ws, "down", hidden, in, 0, in, false));
  ASSERT_EQ(full.weight.dtype(), DType::kQ8_0);
  const Tensor want = run_linear(full, x);
  std::vector<Tensor> got(2);
  testing::run_ranks(2, [&](int rank, Communicator& comm) {
    const TpShard tp{rank, 2, &comm};
    auto rws = weights_for(tp, DType::kQ8_0);
    auto l = load_row_parallel(*rws, "down", hidden, in, rank * 64, 64, false);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    Tensor y = run_linear(*l, x.slice(1, rank * 64, (rank + 1) * 64).contiguous());
    tp_all_reduce(tp, y);
    got[rank] = y;
    // 48 columns are not whole 32-element blocks.
    auto bad = load_row_parallel(*rws, "down96", hidden, 96, rank * 48, 48, false);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("blocks"), std::string::npos) << bad.status().message();
  });
  // 8-bit activation blocks of 32 are the same blocks in both: only the sum order differs.
  for (int r = 0; r < 2; ++r) EXPECT_LE(max_diff(got[r], want), 1e-4f) << "rank " << r;
}

}  // namespace
}  // namespace rlm
