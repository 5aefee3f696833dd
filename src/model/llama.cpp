#include "model/llama.h"

#include <cmath>

namespace rlm {

StatusOr<std::unique_ptr<CausalLM>> LlamaForCausalLM::create(const ModelConfig& config, const LlamaVariant& variant,
                                                              WeightSource& weights) {
  std::unique_ptr<LlamaForCausalLM> m(new LlamaForCausalLM(config, variant));
  RLM_RETURN_IF_ERROR(m->load(weights));
  return std::unique_ptr<CausalLM>(std::move(m));
}

KVShape LlamaForCausalLM::kv_shape() const {
  return {config_.num_hidden_layers, num_kv_heads_, config_.head_dim};
}

Status LlamaForCausalLM::load(WeightSource& ws) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, d = c.head_dim, hq = c.num_attention_heads, hk = c.num_key_value_heads;
  tp_ = ws.load_options.tp;
  RLM_ASSIGN_OR_RETURN(const HeadShard q_shard, shard_heads(hq, tp_, "attention heads"));
  RLM_ASSIGN_OR_RETURN(const HeadShard kv_shard, shard_heads(hk, tp_, "KV heads"));
  RLM_ASSIGN_OR_RETURN(intermediate_, shard_size(c.intermediate_size, tp_, "intermediate_size"));
  num_qo_heads_ = q_shard.count;
  num_kv_heads_ = kv_shard.count;
  RLM_ASSIGN_OR_RETURN(embed_tokens_, load_vocab_parallel(ws, "model.embed_tokens.weight", c.vocab_size, hidden));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    DecoderLayer layer;
    RLM_ASSIGN_OR_RETURN(layer.input_layernorm, ws.get(p + ".input_layernorm.weight", {hidden}));
    RLM_ASSIGN_OR_RETURN(layer.post_attention_layernorm, ws.get(p + ".post_attention_layernorm.weight", {hidden}));
    RLM_ASSIGN_OR_RETURN(layer.qkv_proj, load_qkv_parallel(ws, p + ".self_attn", hq, hk, q_shard, kv_shard, d, hidden,
                                                           variant_.qkv_bias));
    RLM_ASSIGN_OR_RETURN(layer.o_proj, load_row_parallel(ws, p + ".self_attn.o_proj", hidden, hq * d, q_shard.first * d,
                                                         q_shard.count * d, variant_.o_bias, q_shard.replica_leader));
    if (variant_.qk_norm) {
      RLM_ASSIGN_OR_RETURN(layer.q_norm, ws.get(p + ".self_attn.q_norm.weight", {d}));
      RLM_ASSIGN_OR_RETURN(layer.k_norm, ws.get(p + ".self_attn.k_norm.weight", {d}));
    }
    layer.is_moe = !variant_.moe_layers.empty() && variant_.moe_layers[l];
    if (layer.is_moe) {  // never under --tp > 1: check_tp (engine/model_loader.cpp) refuses Qwen3-MoE
      RLM_ASSIGN_OR_RETURN(layer.moe, load_sparse_moe(ws, p + ".mlp", variant_.moe, hidden));
    } else {
      RLM_ASSIGN_OR_RETURN(layer.gate_up_proj, load_gate_up_parallel(ws, p + ".mlp", c.intermediate_size,
                                                                     intermediate_, hidden, variant_.mlp_bias));
      RLM_ASSIGN_OR_RETURN(layer.down_proj,
                           load_row_parallel(ws, p + ".mlp.down_proj", hidden, c.intermediate_size,
                                             tp_.rank * intermediate_, intermediate_, variant_.mlp_bias));
    }
    RLM_ASSIGN_OR_RETURN(const KvScales kvs, load_kv_scales(ws, p + ".self_attn"));
    kv_scales_.push_back(kvs);
    layer.attn.layer_id = l;
    layer.attn.num_qo_heads = num_qo_heads_;
    layer.attn.num_kv_heads = num_kv_heads_;
    layer.attn.head_dim = d;
    layer.attn.params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    layer.attn.params.sliding_window = c.is_sliding_layer(l) ? c.sliding_window : -1;
    layers_.push_back(std::move(layer));
  }
  RLM_ASSIGN_OR_RETURN(norm_, ws.get("model.norm.weight", {hidden}));
  RLM_ASSIGN_OR_RETURN(lm_head_, load_lm_head(ws, c, embed_tokens_));
  // Norm weights in f32 so the elementwise kernels see one dtype.
  for (DecoderLayer& layer : layers_) {
    layer.input_layernorm = layer.input_layernorm.to(DType::kF32);
    layer.post_attention_layernorm = layer.post_attention_layernorm.to(DType::kF32);
    if (variant_.qk_norm) {
      layer.q_norm = layer.q_norm.to(DType::kF32);
      layer.k_norm = layer.k_norm.to(DType::kF32);
    }
  }
  norm_ = norm_.to(DType::kF32);

  rope_cos_sin_ = make_rope_cache(c.rope, d, c.max_position_embeddings);
  return Status::ok();
}

void LlamaForCausalLM::to(Device device) {
  if (device == device_) return;
  const bool tied = lm_head_.storage() == embed_tokens_.storage();
  auto move = [&](Tensor& t) {
    if (t.defined()) t = t.contiguous().to(device);
  };
  auto move_l = [&](Linear& l) { move_linear(l, device); };
  move(embed_tokens_);
  for (DecoderLayer& layer : layers_) {
    move(layer.input_layernorm);
    move(layer.post_attention_layernorm);
    move_l(layer.qkv_proj);
    move_l(layer.o_proj);
    move(layer.q_norm);
    move(layer.k_norm);
    move_l(layer.gate_up_proj);
    move_l(layer.down_proj);
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

Tensor LlamaForCausalLM::forward(const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens, hidden = c.hidden_size, d = c.head_dim;
  const int64_t hq = num_qo_heads_, hk = num_kv_heads_, inter = intermediate_;  // this rank's
  RLM_CHECK(batch.attn_backend != nullptr) << "ForwardBatch without an attention backend";
  const Device dev = batch.input_ids.device();
  RLM_CHECK(dev == device_) << "batch on " << dev.to_string() << " but the model is on " << device_.to_string();

  Tensor hidden_states = Tensor::empty({n, hidden}, DType::kF32, dev);  // [num_tokens, hidden]
  Tensor residual = Tensor::empty({n, hidden}, DType::kF32, dev);       // [num_tokens, hidden]
  Tensor qkv = Tensor::empty({n, (hq + 2 * hk) * d}, DType::kF32, dev);
  Tensor gate_up = Tensor::empty({n, 2 * inter}, DType::kF32, dev);
  Tensor act = Tensor::empty({n, inter}, DType::kF32, dev);
  Tensor moe_out;  // [num_tokens, hidden] (MoE layers only)
  if (!variant_.moe_layers.empty()) moe_out = Tensor::empty({n, hidden}, DType::kF32, dev);

  tp_embedding(tp_, batch.input_ids, embed_tokens_, c.vocab_size, hidden_states);
  const float eps = static_cast<float>(c.rms_norm_eps);
  // The residual stream: `residual` holds the sum so far; after a projection back to the stream
  // (o_proj, down_proj, the MoE block) either the projection has added itself to it in its own
  // kernel (try_fused_linear's accumulate: decode batches on one GPU), or hidden_states holds
  // the projection (`pending`), which the next norm adds in (fused_add_rms_norm).
  bool pending = false;
  // After a row-parallel projection hidden_states holds this rank's partial sums; their all-reduce
  // waits for the norm that follows, which may take it into its kernel. reduce(w) all-reduces them
  // if pending and returns whether it also ran that norm (residual += hidden_states; hidden_states
  // = rms_norm(residual) * w) -- the fused kernel.
  bool partial = false;
  auto reduce = [&](const Tensor& norm_weight) {
    if (!partial) return false;
    partial = false;
    if (tp_all_reduce_add_rms_norm(tp_, hidden_states, residual, norm_weight, eps)) return true;
    tp_all_reduce(tp_, hidden_states);
    return false;
  };
  // out = lin(norm(residual (+= hidden_states if pending))).
  auto norm_linear = [&](const Tensor& norm_weight, const Linear& lin, const Tensor& out) {
    if (!pending) return apply_rms_norm_linear(residual, norm_weight, eps, hidden_states, lin, out);
    pending = false;
    if (reduce(norm_weight)) return apply_linear(lin, hidden_states, out);
    apply_norm_linear(hidden_states, &residual, norm_weight, eps, lin, out);
  };
  // residual += lin(x), in lin's kernel where it can, else through hidden_states.
  auto project = [&](const Linear& lin, const Tensor& x) {
    if (!tp_.active() && try_fused_linear(lin, x, residual, {.accumulate = true})) return;
    apply_linear(lin, x, hidden_states);
    partial = tp_.active();
    pending = true;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DecoderLayer& layer = layers_[l];
    // Self-attention: the input norm (layer 0 starts the residual stream) and the QKV projection.
    if (l == 0) {
      residual.copy_(hidden_states);
      apply_norm_linear(hidden_states, nullptr, layer.input_layernorm, eps, layer.qkv_proj, qkv);
    } else {
      norm_linear(layer.input_layernorm, layer.qkv_proj, qkv);
    }
    Tensor heads = qkv.view({n, hq + 2 * hk, d});
    Tensor q = heads.slice(1, 0, hq);             // [num_tokens, num_qo_heads, head_dim]
    Tensor k = heads.slice(1, hq, hq + hk);       // [num_tokens, num_kv_heads, head_dim]
    Tensor v = heads.slice(1, hq + hk, hq + 2 * hk);
    QkPrologue prologue{&batch.positions, &rope_cos_sin_, /*is_neox=*/true};
    if (variant_.qk_norm)
      prologue = {&batch.positions, &rope_cos_sin_, true, &layer.q_norm, &layer.k_norm, eps};
    // The q/k norms, RoPE, the KV store and attention: [num_tokens, num_qo_heads, head_dim]
    Tensor attn = batch.attn_backend->forward_rotary(q, k, v, prologue, layer.attn, batch);
    project(layer.o_proj, attn.view({n, hq * d}));
    // MLP.
    if (layer.is_moe) {
      if (pending) {
        if (!reduce(layer.post_attention_layernorm)) {
          ops::fused_add_rms_norm(hidden_states, residual, layer.post_attention_layernorm, eps);
        }
      } else {
        ops::rms_norm(residual, layer.post_attention_layernorm, eps, hidden_states);
      }
      sparse_moe_forward(layer.moe, variant_.moe, hidden_states, moe_out);
      hidden_states.copy_(moe_out);
      pending = true;
    } else if (pending) {
      norm_linear(layer.post_attention_layernorm, layer.gate_up_proj, gate_up);
      apply_silu_and_mul_linear(layer.down_proj, gate_up, act, hidden_states);
      partial = tp_.active();
      pending = true;
    } else {
      apply_rms_norm_linear_silu(residual, layer.post_attention_layernorm, eps, hidden_states,
                                 layer.gate_up_proj, gate_up, act);
      project(layer.down_proj, act);
    }
  }
  if (pending) {
    if (!reduce(norm_)) ops::fused_add_rms_norm(hidden_states, residual, norm_, eps);
  } else {
    ops::rms_norm(residual, norm_, eps, hidden_states);
  }

  const int64_t num_out = batch.logits_indices.numel();
  Tensor selected = Tensor::empty({num_out, hidden}, DType::kF32, dev);  // [num_outputs, hidden]
  ops::embedding(batch.logits_indices, hidden_states, selected);
  return tp_lm_head(tp_, selected, lm_head_, c.vocab_size);
}

}  // namespace rlm
