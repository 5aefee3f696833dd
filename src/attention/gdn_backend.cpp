#include "attention/gdn_backend.h"

#include <cmath>

#include "cache/mamba_pool.h"

namespace rlm {

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
}

Tensor GatedDeltaNetBackend::forward(const LinearAttentionLayer& layer, const Tensor& mixed_qkv, const Tensor& a,
                                     const Tensor& b, const ForwardBatch& batch) {
  RLM_CHECK(batch.mamba_pool != nullptr) << "ForwardBatch without a MambaPool";
  const MambaPool& pool = *batch.mamba_pool;
  const int64_t n = mixed_qkv.size(0), hk = layer.num_k_heads, hv = layer.num_v_heads;
  const int64_t dk = layer.head_k_dim, dv = layer.head_v_dim, key_dim = layer.key_dim();
  const Device dev = mixed_qkv.device();
  Tensor conv_out = Tensor::empty({n, layer.conv_dim()}, DType::kF32, dev);  // [num_tokens, conv_dim]
  ops::causal_conv1d(mixed_qkv, layer.conv_weight, std::nullopt, pool.conv_state(layer.layer_id), segments_,
                     /*silu=*/true, conv_out);
  // Per-head views need contiguous q / k / v blocks.
  const Tensor q = conv_out.slice(1, 0, key_dim).contiguous().view({n, hk, dk});
  const Tensor k = conv_out.slice(1, key_dim, 2 * key_dim).contiguous().view({n, hk, dk});
  const Tensor v = conv_out.slice(1, 2 * key_dim, layer.conv_dim()).contiguous().view({n, hv, dv});
  Tensor g = Tensor::empty({n, hv}, DType::kF32, dev);     // [num_tokens, num_v_heads]
  Tensor beta = Tensor::empty({n, hv}, DType::kF32, dev);  // [num_tokens, num_v_heads]
  ops::gdn_gating(a, b, layer.A_log, layer.dt_bias, g, beta);
  Tensor out = Tensor::empty({n, hv, dv}, DType::kF32, dev);
  ops::GatedDeltaRuleParams params;
  params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  params.use_qk_l2norm = true;
  if (recurrent_) {
    ops::recurrent_gated_delta_rule(q, k, v, g, beta, pool.ssm_state(layer.layer_id), segments_, params, out);
  } else {
    ops::chunk_gated_delta_rule(q, k, v, g, beta, pool.ssm_state(layer.layer_id), segments_, params, out);
  }
  return out;
}

}  // namespace rlm
