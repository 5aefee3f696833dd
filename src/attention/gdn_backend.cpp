#include "attention/gdn_backend.h"

#include <cmath>
#include <numeric>
#include <tuple>

#include "cache/mamba_pool.h"

namespace rlm {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows of `heads * dim` floats starting at element `offset` of the 1-D `flat`, `row_stride` apart,
// as a [rows, heads, dim] view (row_stride must be a multiple of dim).
Tensor heads_view(const Tensor& flat, int64_t offset, int64_t rows, int64_t row_stride, int64_t heads, int64_t dim) {
  return flat.slice(0, offset, offset + rows * row_stride).view({rows, row_stride / dim, dim}).slice(1, 0, heads);
}

}  // namespace

void GatedDeltaNetBackend::init_forward_metadata(const ForwardBatch& batch) {
  RLM_CHECK(batch.mamba_pool != nullptr) << "ForwardBatch without a MambaPool for the linear-attention layers";
  const int64_t bs = batch.batch_size;
  RLM_CHECK_EQ(static_cast<int64_t>(batch.mamba_slots_cpu.size()), bs) << " mamba slots per request";
  RLM_CHECK_EQ(static_cast<int64_t>(batch.prefix_lens_cpu.size()), bs) << " prefix lengths per request";
  const Device device = batch.mamba_pool->device();
  std::vector<int32_t> has_init(bs), track_slots(bs, -1), track_lens(bs, 0);
  bool any_track = false;
  recurrent_ = true;
  for (int64_t r = 0; r < bs; ++r) {
    has_init[r] = batch.prefix_lens_cpu[r] > 0 ? 1 : 0;
    recurrent_ = recurrent_ && batch.extend_lens_cpu[r] == 1;
    if (r < static_cast<int64_t>(batch.mamba_track_slots_cpu.size()) && batch.mamba_track_slots_cpu[r] >= 0) {
      track_slots[r] = batch.mamba_track_slots_cpu[r];
      track_lens[r] = batch.mamba_track_pos_cpu[r] - batch.prefix_lens_cpu[r];
      any_track = true;
    }
  }
  segments_ = ops::StateSegments{};
  segments_.qo_indptr = batch.qo_indptr.to(device);
  segments_.state_slots = batch.mamba_slots.defined() ? batch.mamba_slots.to(device)
                                                      : Tensor::from_vector(batch.mamba_slots_cpu).to(device);
  segments_.has_initial_state = Tensor::from_vector(has_init).to(device);
  if (any_track) {
    segments_.track_slots = Tensor::from_vector(track_slots).to(device);
    segments_.track_lens = Tensor::from_vector(track_lens).to(device);
  }
  // A mixed step (one-token decode entries first, then prompt chunks) runs the recurrent rule on the
  // decode rows, as a decode step would, and the chunked rule on the rest.
  num_decode_ = 0;
  while (num_decode_ < bs && batch.extend_lens_cpu[num_decode_] == 1) ++num_decode_;
  if (recurrent_ || num_decode_ == 0) {
    num_decode_ = 0;
    return;
  }
  const int64_t nd = num_decode_;
  auto part = [&](const Tensor& t, int64_t a, int64_t b) { return t.defined() ? t.slice(0, a, b) : Tensor(); };
  decode_segments_ = ops::StateSegments{};
  decode_segments_.qo_indptr = segments_.qo_indptr.slice(0, 0, nd + 1);  // 0 .. nd
  extend_segments_ = ops::StateSegments{};
  std::vector<int32_t> qo(1, 0);  // the chunks' rows, counted from the first chunk row
  for (int64_t r = nd; r < bs; ++r) qo.push_back(qo.back() + batch.extend_lens_cpu[r]);
  extend_segments_.qo_indptr = Tensor::from_vector(qo).to(device);
  for (auto [dst, lo, hi] : {std::tuple{&decode_segments_, int64_t{0}, nd}, std::tuple{&extend_segments_, nd, bs}}) {
    dst->state_slots = part(segments_.state_slots, lo, hi);
    dst->has_initial_state = part(segments_.has_initial_state, lo, hi);
    dst->track_slots = part(segments_.track_slots, lo, hi);
    dst->track_lens = part(segments_.track_lens, lo, hi);
  }
}

Tensor GatedDeltaNetBackend::forward(const LinearAttentionLayer& layer, const Tensor& mixed_qkv, const Tensor& a,
                                     const Tensor& b, const ForwardBatch& batch) {
  RLM_CHECK(batch.mamba_pool != nullptr) << "ForwardBatch without a MambaPool";
  const MambaPool& pool = *batch.mamba_pool;
  const int64_t n = mixed_qkv.size(0), hk = layer.num_k_heads, hv = layer.num_v_heads;
  const int64_t dk = layer.head_k_dim, dv = layer.head_v_dim, key_dim = layer.key_dim();
  const Device dev = mixed_qkv.device();
  // The conv output rows live in one flat buffer with a row stride P that both dk and dv divide,
  // so q, k and v are per-head views of it ([n, P / d, d] sliced to the heads) without copies.
  const int64_t row = round_up(layer.conv_dim(), std::lcm(dk, dv));
  Tensor flat = Tensor::empty({n * row + 2 * key_dim}, DType::kF32, dev);
  Tensor conv_out = flat.slice(0, 0, n * row).view({n, row}).slice(1, 0, layer.conv_dim());  // [num_tokens, conv_dim]
  ops::causal_conv1d(mixed_qkv, layer.conv_weight, std::nullopt, pool.conv_state(layer.layer_id), segments_,
                     /*silu=*/true, conv_out);
  const Tensor q = heads_view(flat, 0, n, row, hk, dk);            // [num_tokens, num_k_heads, head_k_dim]
  const Tensor k = heads_view(flat, key_dim, n, row, hk, dk);      // [num_tokens, num_k_heads, head_k_dim]
  const Tensor v = heads_view(flat, 2 * key_dim, n, row, hv, dv);  // [num_tokens, num_v_heads, head_v_dim]
  Tensor g = Tensor::empty({n, hv}, DType::kF32, dev);     // [num_tokens, num_v_heads]
  Tensor beta = Tensor::empty({n, hv}, DType::kF32, dev);  // [num_tokens, num_v_heads]
  ops::gdn_gating(a, b, layer.A_log, layer.dt_bias, g, beta);
  Tensor out = Tensor::empty({n, hv, dv}, DType::kF32, dev);
  ops::GatedDeltaRuleParams params;
  params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  params.use_qk_l2norm = true;
  const Tensor& ssm = pool.ssm_state(layer.layer_id);
  if (recurrent_) {
    ops::recurrent_gated_delta_rule(q, k, v, g, beta, ssm, segments_, params, out);
  } else if (num_decode_ > 0) {
    const int64_t nd = static_cast<int64_t>(num_decode_);  // token rows [0, nd) are the decode rows
    auto rows = [](const Tensor& t, int64_t a, int64_t b) { return t.slice(0, a, b); };
    ops::recurrent_gated_delta_rule(rows(q, 0, nd), rows(k, 0, nd), rows(v, 0, nd), rows(g, 0, nd),
                                    rows(beta, 0, nd), ssm, decode_segments_, params, rows(out, 0, nd));
    ops::chunk_gated_delta_rule(rows(q, nd, n), rows(k, nd, n), rows(v, nd, n), rows(g, nd, n), rows(beta, nd, n),
                                ssm, extend_segments_, params, rows(out, nd, n));
  } else {
    ops::chunk_gated_delta_rule(q, k, v, g, beta, ssm, segments_, params, out);
  }
  return out;
}

}  // namespace rlm
