// Tensor-parallel weight loading and the collectives of a sharded forward (Megatron-style, as
// SGLang and vLLM shard): column-parallel projections (q/k/v heads, gate/up rows) keep a block of
// output rows; row-parallel ones (o_proj, down_proj) keep the matching block of input columns and
// their partial outputs are summed by an all-reduce; the embedding and the LM head are split along
// the vocabulary (embedding rows of other shards read as zero, summed by an all-reduce; LM-head
// logits all-gathered). Heads that do not divide by the group size are replicated: with fewer
// heads than ranks each rank holds one (KV heads as usual; query heads too, and only the first
// rank of each replica group adds its o_proj output). Model files call these helpers; with a
// group of one they are the plain loaders and ops, with no copies and no communicator calls.
#pragma once

#include <string>
#include <vector>

#include "model/layers.h"
#include "model/weight_source.h"

namespace rlm {

// The heads a rank holds: [first, first + count) of `total`. replica_leader: the first of the
// ranks that hold these heads (always true when the heads are split, not replicated).
struct HeadShard {
  int64_t first = 0;
  int64_t count = 0;
  bool replica_leader = true;
};
// Split when total % size == 0; one head per rank (head rank * total / size) when size % total == 0;
// otherwise kInvalidArgument naming `what`.
StatusOr<HeadShard> shard_heads(int64_t total, const TpShard& tp, const std::string& what);
// An even split of `total` (an MLP's intermediate size); kInvalidArgument when it does not divide.
StatusOr<int64_t> shard_size(int64_t total, const TpShard& tp, const std::string& what);

// The vocabulary shard: rows [rank * per_rank, min(vocab, (rank + 1) * per_rank)) of the
// embedding, stored as per_rank + 1 rows (zero rows past the vocabulary and one last zero row that
// every token outside the shard reads).
struct VocabShard {
  int64_t vocab = 0;
  int64_t per_rank = 0;
  int64_t start = 0;
  int64_t rows() const { return per_rank + 1; }
};
VocabShard shard_vocab(int64_t vocab, const TpShard& tp);

// Column-parallel fused projection (QKV, gate_up): part i keeps output rows
// [row_start[i], row_start[i] + row_count[i]) of its outs[i] rows (bias rows too).
StatusOr<Linear> load_column_parallel(WeightSource& ws, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& outs, const std::vector<int64_t>& row_start,
                                      const std::vector<int64_t>& row_count, int64_t in, bool with_bias);
// Fused QKV with q heads `q`, KV heads `kv` of head_dim d (column-parallel by heads).
StatusOr<Linear> load_qkv_parallel(WeightSource& ws, const std::string& attn_prefix, int64_t num_qo_heads,
                                   int64_t num_kv_heads, const HeadShard& q, const HeadShard& kv, int64_t d,
                                   int64_t hidden, bool with_bias);
// Fused gate_up ([gate; up], each `intermediate` rows) keeping `local` rows of each.
StatusOr<Linear> load_gate_up_parallel(WeightSource& ws, const std::string& mlp_prefix, int64_t intermediate,
                                       int64_t local, int64_t hidden, bool with_bias);
// Row-parallel projection [out, in]: keeps input columns [col_start, col_start + col_count); the
// bias on rank 0 only (added once by the all-reduce); all-zero weights when !contributes.
// Block-quantized weights split along whole blocks (kInvalidArgument otherwise).
StatusOr<Linear> load_row_parallel(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                                   int64_t col_start, int64_t col_count, bool with_bias, bool contributes = true);
// The embedding's vocabulary shard [shard.rows(), hidden] (the whole table when not sharded).
StatusOr<Tensor> load_vocab_parallel(WeightSource& ws, const std::string& name, int64_t vocab, int64_t hidden);

// Stacked MoE experts split along each expert's intermediate size (every rank holds every expert,
// as SGLang's default MoE tensor parallelism does): gate and up rows [r*inter/N, (r+1)*inter/N) of
// each expert, and the same columns of its down projection (a row-parallel sum over ranks).
//   w_gate_up: [num_experts, 2 * inter, hidden]; w_down: [num_experts, hidden, inter] (replaced by the shard's).
Status shard_experts(const TpShard& tp, Tensor& w_gate_up, Tensor& w_down);

// The forward's collectives (no-ops with a group of one).
// x = sum over ranks of x (after a row-parallel projection).
void tp_all_reduce(const TpShard& tp, const Tensor& x);
// tp_all_reduce(x) and then ops::fused_add_rms_norm(x, residual, weight, eps) (residual += x;
// x = rms_norm(residual) * weight) in one step where the group's communicator fuses them
// (Communicator::all_reduce_add_rms_norm); returns false, with nothing done, when it does not or
// the group is one rank -- the caller then reduces and normalises itself.
//   x, residual: contiguous f32 [num_tokens, hidden]; weight: [hidden].
bool tp_all_reduce_add_rms_norm(const TpShard& tp, const Tensor& x, const Tensor& residual,
                                const Tensor& weight, float eps);
// out = embedding rows of `ids` from a vocab-parallel table (the plain lookup when not sharded).
//   ids: i32 [num_tokens]; table: [shard.rows() or vocab, hidden]; out: f32 [num_tokens, hidden].
void tp_embedding(const TpShard& tp, const Tensor& ids, const Tensor& table, int64_t vocab, const Tensor& out);
// Logits of every vocabulary entry from a vocab-parallel LM head.
//   x: f32 [num_outputs, hidden]; lm_head: [shard.rows() or vocab, hidden]. Returns f32 [num_outputs, vocab].
Tensor tp_lm_head(const TpShard& tp, const Tensor& x, const Tensor& lm_head, int64_t vocab);

}  // namespace rlm
