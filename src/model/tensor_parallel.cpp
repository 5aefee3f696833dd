#include "model/tensor_parallel.h"

#include <cstring>
#include <map>

#include "dist/communicator.h"
#include "ops/token_ops.h"

namespace rlm {

namespace {

// A WeightSource that serves a block of each named tensor: the full tensor from the underlying
// source (so every rank slices the same values, random dummy weights included), narrowed along
// one dimension; all-zero when the rank does not contribute. Names without a rule pass through.
class ShardSource : public WeightSource {
 public:
  struct Rule {
    int64_t dim = 0;
    int64_t start = 0;
    int64_t count = 0;
    int64_t full = 0;
    bool zero = false;
  };
  explicit ShardSource(WeightSource& base) : base_(base) { load_options = base.load_options; }
  void add(const std::string& name, const Rule& rule) { rules_[name] = rule; }

  bool has(const std::string& name) const override { return base_.has(name); }
  std::vector<std::string> names() const override { return base_.names(); }
  std::string describe() const override { return base_.describe(); }

  StatusOr<Tensor> get(const std::string& name, const Shape& expected_shape) override {
    const auto it = rules_.find(name);
    if (it == rules_.end()) return base_.get(name, expected_shape);
    const Rule& r = it->second;
    Shape full = expected_shape;
    full[static_cast<size_t>(r.dim)] = r.full;
    RLM_ASSIGN_OR_RETURN(Tensor t, base_.get(name, full));
    if (t.dtype() == DType::kF8E4M3) {
      return unimplemented(str(name, ": tensor parallelism does not shard FP8 weights yet (run with --tp 1)"));
    }
    if (is_quantized(t.dtype()) && r.dim == t.dim() - 1) {
      const int64_t bs = dtype_block_size(t.dtype());
      if (r.start % bs != 0 || r.count % bs != 0) {
        return invalid_argument(str("tensor parallel: ", name, " ", t.describe(), " splits into column blocks of ",
                                    r.count, " at ", r.start, ", not whole ", bs, "-element ",
                                    dtype_name(t.dtype()), " blocks; use a smaller --tp"));
      }
    }
    Tensor shard = t.slice(r.dim, r.start, r.start + r.count).contiguous();
    if (r.zero) {
      shard = shard.clone();
      std::memset(shard.data_ptr(), 0, shard.nbytes());
    }
    return shard;
  }

 private:
  WeightSource& base_;
  std::map<std::string, Rule> rules_;
};

}  // namespace

StatusOr<HeadShard> shard_heads(int64_t total, const TpShard& tp, const std::string& what) {
  HeadShard s;
  if (!tp.active()) {
    s.count = total;
    return s;
  }
  if (total % tp.size == 0) {
    s.count = total / tp.size;
    s.first = tp.rank * s.count;
    return s;
  }
  if (tp.size % total == 0) {
    const int64_t replicas = tp.size / total;
    s.count = 1;
    s.first = tp.rank / replicas;
    s.replica_leader = tp.rank % replicas == 0;
    return s;
  }
  return invalid_argument(str("tensor parallel: ", total, " ", what, " do not split over --tp ", tp.size,
                              " (one must divide the other)"));
}

StatusOr<int64_t> shard_size(int64_t total, const TpShard& tp, const std::string& what) {
  if (total % tp.size != 0) {
    return invalid_argument(str("tensor parallel: ", what, " ", total, " does not divide by --tp ", tp.size));
  }
  return total / tp.size;
}

VocabShard shard_vocab(int64_t vocab, const TpShard& tp) {
  VocabShard s;
  s.vocab = vocab;
  s.per_rank = (vocab + tp.size - 1) / tp.size;
  s.start = tp.rank * s.per_rank;
  return s;
}

StatusOr<Linear> load_column_parallel(WeightSource& ws, const std::vector<std::string>& prefixes,
                                      const std::vector<int64_t>& outs, const std::vector<int64_t>& row_start,
                                      const std::vector<int64_t>& row_count, int64_t in, bool with_bias) {
  if (!ws.load_options.tp.active()) return load_fused_linear(ws, prefixes, outs, in, with_bias);
  RLM_CHECK(prefixes.size() == outs.size() && outs.size() == row_start.size() && outs.size() == row_count.size());
  ShardSource src(ws);
  for (size_t i = 0; i < prefixes.size(); ++i) {
    src.add(prefixes[i] + ".weight", {0, row_start[i], row_count[i], outs[i], false});
    if (with_bias) src.add(prefixes[i] + ".bias", {0, row_start[i], row_count[i], outs[i], false});
  }
  return load_fused_linear(src, prefixes, row_count, in, with_bias);
}

StatusOr<Linear> load_qkv_parallel(WeightSource& ws, const std::string& attn_prefix, int64_t num_qo_heads,
                                   int64_t num_kv_heads, const HeadShard& q, const HeadShard& kv, int64_t d,
                                   int64_t hidden, bool with_bias) {
  return load_column_parallel(ws, {attn_prefix + ".q_proj", attn_prefix + ".k_proj", attn_prefix + ".v_proj"},
                              {num_qo_heads * d, num_kv_heads * d, num_kv_heads * d},
                              {q.first * d, kv.first * d, kv.first * d}, {q.count * d, kv.count * d, kv.count * d},
                              hidden, with_bias);
}

StatusOr<Linear> load_gate_up_parallel(WeightSource& ws, const std::string& mlp_prefix, int64_t intermediate,
                                       int64_t local, int64_t hidden, bool with_bias) {
  const int64_t start = ws.load_options.tp.rank * local;
  return load_column_parallel(ws, {mlp_prefix + ".gate_proj", mlp_prefix + ".up_proj"}, {intermediate, intermediate},
                              {start, start}, {local, local}, hidden, with_bias);
}

StatusOr<Linear> load_row_parallel(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                                   int64_t col_start, int64_t col_count, bool with_bias, bool contributes) {
  const TpShard& tp = ws.load_options.tp;
  if (!tp.active()) return load_linear(ws, prefix, out, in, with_bias);
  ShardSource src(ws);
  src.add(prefix + ".weight", {1, col_start, col_count, in, !contributes});
  return load_linear(src, prefix, out, col_count, with_bias && tp.rank == 0);
}

StatusOr<Tensor> load_vocab_parallel(WeightSource& ws, const std::string& name, int64_t vocab, int64_t hidden) {
  const TpShard& tp = ws.load_options.tp;
  if (!tp.active()) return ws.get(name, {vocab, hidden});
  RLM_ASSIGN_OR_RETURN(Tensor full, ws.get(name, {vocab, hidden}));
  if (full.dtype() == DType::kF8E4M3) {
    return unimplemented(str(name, ": tensor parallelism does not shard FP8 weights yet (run with --tp 1)"));
  }
  const VocabShard s = shard_vocab(vocab, tp);
  const int64_t end = std::min(vocab, s.start + s.per_rank), rows = std::max<int64_t>(end - s.start, 0);
  Tensor shard = Tensor::empty({s.rows(), hidden}, full.dtype());
  std::memset(shard.data_ptr(), 0, shard.nbytes());
  if (rows > 0) shard.slice(0, 0, rows).copy_(full.slice(0, s.start, end));
  return shard;
}

Status shard_experts(const TpShard& tp, Tensor& w_gate_up, Tensor& w_down) {
  if (!tp.active()) return Status::ok();
  const int64_t e = w_down.size(0), hidden = w_down.size(1), inter = w_down.size(2);
  RLM_ASSIGN_OR_RETURN(const int64_t local, shard_size(inter, tp, "moe_intermediate_size"));
  const int64_t start = tp.rank * local;
  std::vector<Tensor> gate_up, down;
  for (int64_t x = 0; x < e; ++x) {
    const Tensor gu = w_gate_up.select(0, x);
    gate_up.push_back(gu.slice(0, start, start + local));
    gate_up.push_back(gu.slice(0, inter + start, inter + start + local));
    down.push_back(w_down.select(0, x).slice(1, start, start + local).contiguous());
  }
  w_gate_up = concat_rows(gate_up).view({e, 2 * local, hidden});
  w_down = concat_rows(down).view({e, hidden, local});
  return Status::ok();
}

void tp_all_reduce(const TpShard& tp, const Tensor& x) {
  if (tp.active()) tp.comm->all_reduce_sum(x);
}

bool tp_all_reduce_add_rms_norm(const TpShard& tp, const Tensor& x, const Tensor& residual,
                                const Tensor& weight, float eps) {
  return tp.active() && tp.comm->all_reduce_add_rms_norm(x, residual, weight, eps);
}

void tp_embedding(const TpShard& tp, const Tensor& ids, const Tensor& table, int64_t vocab, const Tensor& out) {
  if (!tp.active()) return ops::embedding(ids, table, out);
  const VocabShard s = shard_vocab(vocab, tp);
  Tensor local = Tensor::empty({ids.numel()}, DType::kI32, ids.device());
  ops::shard_token_ids(ids.contiguous(), static_cast<int32_t>(s.start), static_cast<int32_t>(s.per_rank),
                       static_cast<int32_t>(s.per_rank), local);
  ops::embedding(local, table, out);
  tp.comm->all_reduce_sum(out);
}

Tensor tp_lm_head(const TpShard& tp, const Tensor& x, const Tensor& lm_head, int64_t vocab) {
  const int64_t m = x.size(0);
  Tensor logits = Tensor::empty({m, vocab}, DType::kF32, x.device());
  if (!tp.active()) {
    ops::linear(x, lm_head, std::nullopt, logits);
    return logits;
  }
  const VocabShard s = shard_vocab(vocab, tp);
  Tensor local = Tensor::empty({m, s.rows()}, DType::kF32, x.device());
  ops::linear(x, lm_head, std::nullopt, local);
  Tensor all = Tensor::empty({m, s.rows() * tp.size}, DType::kF32, x.device());
  all_gather_last_dim(*tp.comm, local, all);
  for (int r = 0; r < tp.size; ++r) {
    const int64_t start = r * s.per_rank, end = std::min(vocab, start + s.per_rank);
    if (end > start && m > 0) {
      logits.slice(1, start, end).copy_(all.slice(1, r * s.rows(), r * s.rows() + (end - start)));
    }
  }
  return logits;
}

}  // namespace rlm
