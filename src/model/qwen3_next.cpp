#include "model/qwen3_next.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "ops/linear_attention_ops.h"
#include "ops/moe_ops.h"

namespace rlm {
namespace {

using nlohmann::json;

bool present(const json& j, const char* key) { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }

Status get_positive(const json& j, const char* key, int64_t* out) {
  if (!present(j, key)) return Status::ok();  // keep the default
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return invalid_argument(str("field '", key, "' must be a positive integer, got ", v.dump()));
  }
  *out = v.get<int64_t>();
  return Status::ok();
}

// Rows [begin, end) of a weight [out, in] (a view).
Tensor rows(const Tensor& w, int64_t begin, int64_t end) { return w.slice(0, begin, end); }

}  // namespace

StatusOr<Qwen3NextSpec> parse_qwen3_next_spec(ModelConfig& c) {
  const json& j = c.raw;
  Qwen3NextSpec s;
  // Qwen3NextConfig defaults that ModelConfig (Llama defaults) does not know.
  if (!present(j, "head_dim")) c.head_dim = 256;
  const bool has_partial = present(j, "partial_rotary_factor") ||
                           (present(j, "rope_parameters") && present(j.at("rope_parameters"), "partial_rotary_factor")) ||
                           (present(j, "rope_scaling") && present(j.at("rope_scaling"), "partial_rotary_factor"));
  if (!has_partial) c.rope.partial_rotary_factor = 0.25;
  if (c.rotary_dim() <= 0 || c.rotary_dim() % 2 != 0) {
    return invalid_argument(str("head_dim ", c.head_dim, " * partial_rotary_factor ", c.rope.partial_rotary_factor,
                                " must give a positive even number of rotary channels"));
  }
  RLM_RETURN_IF_ERROR(get_positive(j, "linear_num_key_heads", &s.linear_num_key_heads));
  RLM_RETURN_IF_ERROR(get_positive(j, "linear_num_value_heads", &s.linear_num_value_heads));
  RLM_RETURN_IF_ERROR(get_positive(j, "linear_key_head_dim", &s.linear_key_head_dim));
  RLM_RETURN_IF_ERROR(get_positive(j, "linear_value_head_dim", &s.linear_value_head_dim));
  RLM_RETURN_IF_ERROR(get_positive(j, "linear_conv_kernel_dim", &s.linear_conv_kernel_dim));
  if (s.linear_num_value_heads % s.linear_num_key_heads != 0) {
    return invalid_argument(str("linear_num_value_heads (", s.linear_num_value_heads,
                                ") must be a multiple of linear_num_key_heads (", s.linear_num_key_heads, ")"));
  }
  const int64_t n = c.num_hidden_layers;
  // Layer pattern: layer_types, else every full_attention_interval-th layer is full attention.
  if (present(j, "layer_types")) {
    const json& lt = j.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != n) {
      return invalid_argument(str("field 'layer_types' must list ", n, " layers"));
    }
    for (const json& t : lt) {
      if (t == "linear_attention") {
        s.is_linear.push_back(true);
      } else if (t == "full_attention") {
        s.is_linear.push_back(false);
      } else {
        return invalid_argument(str("field 'layer_types' has ", t.dump(), "; expected linear_attention or full_attention"));
      }
    }
  } else {
    int64_t interval = 4;
    RLM_RETURN_IF_ERROR(get_positive(j, "full_attention_interval", &interval));
    for (int64_t l = 0; l < n; ++l) s.is_linear.push_back((l + 1) % interval != 0);
  }
  if (std::find(s.is_linear.begin(), s.is_linear.end(), false) == s.is_linear.end()) {
    return unimplemented("a Qwen3-Next config without any full_attention layer is not supported (the KV pool needs one)");
  }
  RLM_RETURN_IF_ERROR(parse_moe_spec(j, n, &s, &s.is_moe));
  return s;
}

StatusOr<std::unique_ptr<CausalLM>> Qwen3NextForCausalLM::create(const ModelConfig& config, WeightSource& weights) {
  ModelConfig c = config;
  RLM_ASSIGN_OR_RETURN(Qwen3NextSpec spec, parse_qwen3_next_spec(c));
  std::unique_ptr<Qwen3NextForCausalLM> m(new Qwen3NextForCausalLM(std::move(c), std::move(spec)));
  RLM_RETURN_IF_ERROR(m->load(weights));
  return std::unique_ptr<CausalLM>(std::move(m));
}

StatusOr<std::unique_ptr<CausalLM>> create_qwen3_next(const ModelConfig& config, WeightSource& weights) {
  return Qwen3NextForCausalLM::create(config, weights);
}

KVShape Qwen3NextForCausalLM::kv_shape() const {
  return {num_full_layers_, num_kv_heads_, config_.head_dim};
}

std::optional<MambaShape> Qwen3NextForCausalLM::mamba_shape() const {
  if (num_linear_layers_ == 0) return std::nullopt;
  const Qwen3NextSpec& s = spec_;
  MambaShape m;
  m.num_layers = num_linear_layers_;
  const int64_t hk = linear_k_.count, hv = hk * (s.linear_num_value_heads / s.linear_num_key_heads);  // this rank's
  m.conv_dim = 2 * hk * s.linear_key_head_dim + hv * s.linear_value_head_dim;
  m.conv_width = s.linear_conv_kernel_dim - 1;
  m.num_v_heads = hv;
  m.head_k_dim = s.linear_key_head_dim;
  m.head_v_dim = s.linear_value_head_dim;
  return m;
}

Status Qwen3NextForCausalLM::load_full_attention(WeightSource& ws, const std::string& p, FullAttention& a) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, d = c.head_dim, hq = c.num_attention_heads, hk = c.num_key_value_heads;
  const bool bias = c.attention_bias;
  RLM_ASSIGN_OR_RETURN(const HeadShard qs, shard_heads(hq, tp_, "attention heads"));
  RLM_ASSIGN_OR_RETURN(const HeadShard kvs, shard_heads(hk, tp_, "KV heads"));
  num_kv_heads_ = kvs.count;
  // q_proj holds [q_h | gate_h] per head; regroup as q (this rank's heads) | k | v | gate.
  RLM_ASSIGN_OR_RETURN(Linear q, load_linear(ws, p + ".q_proj", 2 * hq * d, hidden, bias));
  RLM_ASSIGN_OR_RETURN(Linear k, load_linear(ws, p + ".k_proj", hk * d, hidden, bias));
  RLM_ASSIGN_OR_RETURN(Linear v, load_linear(ws, p + ".v_proj", hk * d, hidden, bias));
  auto regroup = [&](const Tensor& qw, const Tensor& kw, const Tensor& vw) {
    std::vector<Tensor> parts;
    const int64_t h0 = qs.first, h1 = qs.first + qs.count, k0 = kvs.first * d, k1 = (kvs.first + kvs.count) * d;
    for (int64_t h = h0; h < h1; ++h) parts.push_back(rows(qw, 2 * h * d, 2 * h * d + d));
    parts.push_back(rows(kw, k0, k1));
    parts.push_back(rows(vw, k0, k1));
    for (int64_t h = h0; h < h1; ++h) parts.push_back(rows(qw, 2 * h * d + d, 2 * (h + 1) * d));
    return concat_rows(parts);
  };
  if (q.weight.dtype() != k.weight.dtype() || q.weight.dtype() != v.weight.dtype()) {
    return invalid_argument(str(p, ": q/k/v projections have different dtypes; cannot fuse them"));
  }
  a.qkvg_proj.weight = regroup(q.weight, k.weight, v.weight);
  if (bias) a.qkvg_proj.bias = regroup(*q.bias, *k.bias, *v.bias);
  RLM_ASSIGN_OR_RETURN(a.o_proj, load_row_parallel(ws, p + ".o_proj", hidden, hq * d, qs.first * d, qs.count * d, bias,
                                                    qs.replica_leader));
  RLM_ASSIGN_OR_RETURN(a.q_norm, load_zero_centred_norm(ws, p + ".q_norm.weight", d));
  RLM_ASSIGN_OR_RETURN(a.k_norm, load_zero_centred_norm(ws, p + ".k_norm.weight", d));
  a.attn.layer_id = num_full_layers_++;
  a.attn.num_qo_heads = qs.count;
  a.attn.num_kv_heads = kvs.count;
  a.attn.head_dim = d;
  a.attn.params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  return Status::ok();
}

Status Qwen3NextForCausalLM::load_linear_attention(WeightSource& ws, const std::string& p, GatedDeltaNet& g) {
  const Qwen3NextSpec& s = spec_;
  const int64_t hidden = config_.hidden_size, hk = s.linear_num_key_heads, hv = s.linear_num_value_heads;
  const int64_t dk = s.linear_key_head_dim, dv = s.linear_value_head_dim, r = hv / hk;
  RLM_ASSIGN_OR_RETURN(linear_k_, shard_heads(hk, tp_, "linear-attention key heads"));
  const int64_t k0 = linear_k_.first, k1 = linear_k_.first + linear_k_.count;  // this rank's key heads
  LinearAttentionLayer& L = g.layer;
  L.num_k_heads = linear_k_.count;
  L.num_v_heads = linear_k_.count * r;
  L.head_k_dim = dk;
  L.head_v_dim = dv;
  // in_proj_qkvz / in_proj_ba are grouped per key head (HF fix_query_key_value_ordering):
  //   qkvz row block h: [q_h (dk) | k_h (dk) | v_h (r * dv) | z_h (r * dv)];  ba row block h: [b_h (r) | a_h (r)].
  // Regroup into q (all key heads) | k | v (all value heads), z, and b | a.
  const int64_t blk = 2 * dk + 2 * r * dv;
  RLM_ASSIGN_OR_RETURN(Tensor qkvz, ws.get(p + ".in_proj_qkvz.weight", {hk * blk, hidden}));
  RLM_ASSIGN_OR_RETURN(Tensor ba, ws.get(p + ".in_proj_ba.weight", {2 * hv, hidden}));
  std::vector<Tensor> qkv_parts, z_parts, ba_parts;
  for (int64_t part = 0; part < 3; ++part) {
    for (int64_t h = k0; h < k1; ++h) {
      const int64_t b0 = h * blk;
      if (part == 0) qkv_parts.push_back(rows(qkvz, b0, b0 + dk));
      if (part == 1) qkv_parts.push_back(rows(qkvz, b0 + dk, b0 + 2 * dk));
      if (part == 2) qkv_parts.push_back(rows(qkvz, b0 + 2 * dk, b0 + 2 * dk + r * dv));
    }
  }
  for (int64_t h = k0; h < k1; ++h) z_parts.push_back(rows(qkvz, h * blk + 2 * dk + r * dv, (h + 1) * blk));
  for (int64_t h = k0; h < k1; ++h) ba_parts.push_back(rows(ba, 2 * r * h, 2 * r * h + r));
  for (int64_t h = k0; h < k1; ++h) ba_parts.push_back(rows(ba, 2 * r * h + r, 2 * r * (h + 1)));
  g.qkv_proj.weight = concat_rows(qkv_parts);
  g.z_proj.weight = concat_rows(z_parts);
  g.ba_proj.weight = concat_rows(ba_parts);
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  RLM_ASSIGN_OR_RETURN(Tensor conv, ws.get(p + ".conv1d.weight", {conv_dim, 1, s.linear_conv_kernel_dim}));
  // The conv's channels are q | k | v of every head: keep this rank's.
  const Tensor cw = conv.contiguous().view({conv_dim, s.linear_conv_kernel_dim});
  L.conv_weight = linear_k_.count == hk ? cw
                                        : concat_rows({rows(cw, k0 * dk, k1 * dk), rows(cw, (hk + k0) * dk, (hk + k1) * dk),
                                                       rows(cw, 2 * hk * dk + k0 * r * dv, 2 * hk * dk + k1 * r * dv)});
  RLM_ASSIGN_OR_RETURN(Tensor a_log, ws.get(p + ".A_log", {hv}));
  RLM_ASSIGN_OR_RETURN(Tensor dt_bias, ws.get(p + ".dt_bias", {hv}));
  L.A_log = a_log.slice(0, k0 * r, k1 * r).to(DType::kF32).contiguous();
  L.dt_bias = dt_bias.slice(0, k0 * r, k1 * r).to(DType::kF32).contiguous();
  RLM_ASSIGN_OR_RETURN(Tensor norm, ws.get(p + ".norm.weight", {dv}));
  g.norm = norm.to(DType::kF32);
  RLM_ASSIGN_OR_RETURN(g.out_proj, load_row_parallel(ws, p + ".out_proj", hidden, hv * dv, k0 * r * dv, k1 * r * dv - k0 * r * dv,
                                                      false, linear_k_.replica_leader));
  L.layer_id = num_linear_layers_++;
  return Status::ok();
}

Status Qwen3NextForCausalLM::load_mlp(WeightSource& ws, const std::string& p, int64_t inter, Mlp& m) {
  const int64_t hidden = config_.hidden_size;
  RLM_ASSIGN_OR_RETURN(const int64_t local, shard_size(inter, tp_, p + " intermediate size"));
  RLM_ASSIGN_OR_RETURN(m.gate_up_proj, load_gate_up_parallel(ws, p, inter, local, hidden, false));
  RLM_ASSIGN_OR_RETURN(m.down_proj, load_row_parallel(ws, p + ".down_proj", hidden, inter, tp_.rank * local, local, false));
  return Status::ok();
}

Status Qwen3NextForCausalLM::load(WeightSource& ws) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  tp_ = ws.load_options.tp;
  num_kv_heads_ = c.num_key_value_heads;
  RLM_ASSIGN_OR_RETURN(linear_k_, shard_heads(spec_.linear_num_key_heads, tp_, "linear-attention key heads"));
  RLM_ASSIGN_OR_RETURN(embed_tokens_, load_vocab_parallel(ws, "model.embed_tokens.weight", c.vocab_size, hidden));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    DecoderLayer layer;
    layer.is_linear = spec_.is_linear[l];
    layer.is_moe = spec_.is_moe[l];
    RLM_ASSIGN_OR_RETURN(layer.input_layernorm, load_zero_centred_norm(ws, p + ".input_layernorm.weight", hidden));
    RLM_ASSIGN_OR_RETURN(layer.post_attention_layernorm,
                         load_zero_centred_norm(ws, p + ".post_attention_layernorm.weight", hidden));
    if (layer.is_linear) {
      RLM_RETURN_IF_ERROR(load_linear_attention(ws, p + ".linear_attn", layer.linear));
    } else {
      RLM_RETURN_IF_ERROR(load_full_attention(ws, p + ".self_attn", layer.attn));
    }
    if (layer.is_moe) {
      RLM_ASSIGN_OR_RETURN(layer.moe, load_sparse_moe(ws, p + ".mlp", spec_, hidden));
      if (tp_.active()) {
        // Each expert split along its intermediate size; the shared expert column- / row-parallel
        // (loaded again as this rank's shard); the forward all-reduces the block's output.
        RLM_RETURN_IF_ERROR(shard_experts(tp_, layer.moe.w_gate_up, layer.moe.w_down));
        if (spec_.shared_expert_intermediate_size > 0) {
          Mlp shared;
          RLM_RETURN_IF_ERROR(load_mlp(ws, p + ".mlp.shared_expert", spec_.shared_expert_intermediate_size, shared));
          layer.moe.shared_gate_up = std::move(shared.gate_up_proj);
          layer.moe.shared_down = std::move(shared.down_proj);
        }
      }
    } else {
      RLM_RETURN_IF_ERROR(load_mlp(ws, p + ".mlp", c.intermediate_size, layer.mlp));
    }
    layers_.push_back(std::move(layer));
  }
  RLM_ASSIGN_OR_RETURN(norm_, load_zero_centred_norm(ws, "model.norm.weight", hidden));
  RLM_ASSIGN_OR_RETURN(lm_head_, load_lm_head(ws, c, embed_tokens_));
  rope_cos_sin_ = make_rope_cache(c.rope, c.head_dim, c.max_position_embeddings);
  return Status::ok();
}

void Qwen3NextForCausalLM::to(Device device) {
  if (device == device_) return;
  const bool tied = lm_head_.storage() == embed_tokens_.storage();
  auto move = [&](Tensor& t) {
    if (t.defined()) t = t.contiguous().to(device);
  };
  auto move_linear = [&](Linear& l) {
    move(l.weight);
    if (l.bias) move(*l.bias);
  };
  move(embed_tokens_);
  for (DecoderLayer& layer : layers_) {
    move(layer.input_layernorm);
    move(layer.post_attention_layernorm);
    for (Linear* l : {&layer.attn.qkvg_proj, &layer.attn.o_proj, &layer.linear.qkv_proj, &layer.linear.z_proj,
                      &layer.linear.ba_proj, &layer.linear.out_proj, &layer.mlp.gate_up_proj, &layer.mlp.down_proj}) {
      move_linear(*l);
    }
    for (Tensor* t : {&layer.attn.q_norm, &layer.attn.k_norm, &layer.linear.norm, &layer.linear.layer.conv_weight,
                      &layer.linear.layer.A_log, &layer.linear.layer.dt_bias}) {
      move(*t);
    }
    move_sparse_moe(layer.moe, device);
  }
  move(norm_);
  if (tied) {
    lm_head_ = embed_tokens_;
  } else {
    move(lm_head_);
  }
  move(rope_cos_sin_);
  device_ = device;
}

void Qwen3NextForCausalLM::full_attention(const FullAttention& a, const Tensor& x, const ForwardBatch& batch,
                                          const Tensor& out) {
  const int64_t n = x.size(0), d = config_.head_dim, hq = a.attn.num_qo_heads, hk = a.attn.num_kv_heads;  // this rank's
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor qkvg = Tensor::empty({n, (2 * hq + 2 * hk) * d}, DType::kF32, x.device());
  ops::linear(x, a.qkvg_proj.weight, a.qkvg_proj.bias, qkvg);
  const Tensor heads = qkvg.view({n, 2 * hq + 2 * hk, d});
  const Tensor q = heads.slice(1, 0, hq);                    // [num_tokens, num_qo_heads, head_dim]
  const Tensor k = heads.slice(1, hq, hq + hk);              // [num_tokens, num_kv_heads, head_dim]
  const Tensor v = heads.slice(1, hq + hk, hq + 2 * hk);     // [num_tokens, num_kv_heads, head_dim]
  const Tensor gate = heads.slice(1, hq + 2 * hk, 2 * hq + 2 * hk);  // [num_tokens, num_qo_heads, head_dim]
  // The q/k norms, RoPE, the KV store and attention: [num_tokens, num_qo_heads, head_dim]
  const QkPrologue prologue{&batch.positions, &rope_cos_sin_, /*is_neox=*/true, &a.q_norm, &a.k_norm, eps};
  Tensor attn = batch.attn_backend->forward_rotary(q, k, v, prologue, a.attn, batch);
  ops::sigmoid_mul(attn, gate, attn);
  ops::linear(attn.view({n, hq * d}), a.o_proj.weight, a.o_proj.bias, out);
}

void Qwen3NextForCausalLM::linear_attention(const GatedDeltaNet& g, const Tensor& x, const ForwardBatch& batch,
                                            const Tensor& out) {
  const LinearAttentionLayer& L = g.layer;
  const int64_t n = x.size(0), hv = L.num_v_heads, dv = L.head_v_dim;
  const Device dev = x.device();
  Tensor mixed_qkv = Tensor::empty({n, L.conv_dim()}, DType::kF32, dev);  // [num_tokens, conv_dim]
  Tensor z = Tensor::empty({n, hv, dv}, DType::kF32, dev);                // [num_tokens, num_v_heads, head_v_dim]
  Tensor ba = Tensor::empty({n, 2 * hv}, DType::kF32, dev);               // [num_tokens, 2 * num_v_heads]: b | a
  ops::linear(x, g.qkv_proj.weight, std::nullopt, mixed_qkv);
  ops::linear(x, g.z_proj.weight, std::nullopt, z.view({n, hv * dv}));
  ops::linear(x, g.ba_proj.weight, std::nullopt, ba);
  Tensor core = batch.attn_backend->forward_linear(L, mixed_qkv, ba.slice(1, hv, 2 * hv), ba.slice(1, 0, hv), batch);
  ops::rms_norm_gated(core, z, g.norm, static_cast<float>(config_.rms_norm_eps), core);
  ops::linear(core.view({n, hv * dv}), g.out_proj.weight, std::nullopt, out);
}

void Qwen3NextForCausalLM::mlp(const Mlp& m, const Tensor& x, const Tensor& out) const {
  const int64_t n = x.size(0), inter = m.down_proj.weight.size(1);
  Tensor gate_up = Tensor::empty({n, 2 * inter}, DType::kF32, x.device());
  Tensor act = Tensor::empty({n, inter}, DType::kF32, x.device());
  ops::linear(x, m.gate_up_proj.weight, std::nullopt, gate_up);
  ops::silu_and_mul(gate_up, act);
  ops::linear(act, m.down_proj.weight, std::nullopt, out);
}

Tensor Qwen3NextForCausalLM::forward(const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens, hidden = c.hidden_size;
  RLM_CHECK(batch.attn_backend != nullptr) << "ForwardBatch without an attention backend";
  const Device dev = batch.input_ids.device();
  RLM_CHECK(dev == device_) << "batch on " << dev.to_string() << " but the model is on " << device_.to_string();

  Tensor hidden_states = Tensor::empty({n, hidden}, DType::kF32, dev);  // [num_tokens, hidden]
  Tensor residual = Tensor::empty({n, hidden}, DType::kF32, dev);       // [num_tokens, hidden]
  Tensor out = Tensor::empty({n, hidden}, DType::kF32, dev);            // [num_tokens, hidden] sublayer output
  tp_embedding(tp_, batch.input_ids, embed_tokens_, c.vocab_size, hidden_states);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DecoderLayer& layer = layers_[l];
    if (l == 0) {
      residual.copy_(hidden_states);
      ops::rms_norm(hidden_states, layer.input_layernorm, eps, hidden_states);
    } else {
      ops::fused_add_rms_norm(hidden_states, residual, layer.input_layernorm, eps);
    }
    if (layer.is_linear) {
      linear_attention(layer.linear, hidden_states, batch, out);
    } else {
      full_attention(layer.attn, hidden_states, batch, out);
    }
    tp_all_reduce(tp_, out);
    std::swap(hidden_states, out);
    ops::fused_add_rms_norm(hidden_states, residual, layer.post_attention_layernorm, eps);
    if (layer.is_moe) {
      sparse_moe_forward(layer.moe, spec_, hidden_states, out);
    } else {
      mlp(layer.mlp, hidden_states, out);
    }
    tp_all_reduce(tp_, out);
    std::swap(hidden_states, out);
  }
  ops::fused_add_rms_norm(hidden_states, residual, norm_, eps);

  const int64_t num_out = batch.logits_indices.numel();
  Tensor selected = Tensor::empty({num_out, hidden}, DType::kF32, dev);  // [num_outputs, hidden]
  ops::embedding(batch.logits_indices, hidden_states, selected);
  return tp_lm_head(tp_, selected, lm_head_, c.vocab_size);
}

}  // namespace rlm
