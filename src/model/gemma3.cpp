#include "model/gemma3.h"

#include <cmath>

namespace rlm {
namespace {

using nlohmann::json;

bool present(const json& j, const char* key) { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }

// Absent or null: keep *out (0 = off for the soft-caps). Present: a positive finite number.
Status get_positive(const json& j, const char* key, double* out) {
  if (!present(j, key)) return Status::ok();
  const json& v = j.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
    return invalid_argument(str("field '", key, "' must be a positive number, got ", v.dump()));
  }
  *out = v.get<double>();
  return Status::ok();
}

// One of transformers 5.x's per-layer-type rope dicts, through the common rope parser.
Status parse_rope_dict(const json& dict, const char* layer_type, int64_t max_pos, RopeParameters* rope) {
  Status s = parse_rope_parameters(json{{"rope_parameters", dict}}, max_pos, rope);
  if (!s.is_ok()) return Status(s.code(), str("rope_parameters.", layer_type, ": ", s.message()));
  return Status::ok();
}

}  // namespace

StatusOr<Gemma3Spec> parse_gemma3_spec(const ModelConfig& c) {
  const json& j = c.raw;
  Gemma3Spec s;
  RLM_RETURN_IF_ERROR(get_positive(j, "query_pre_attn_scalar", &s.query_pre_attn_scalar));
  RLM_RETURN_IF_ERROR(get_positive(j, "final_logit_softcapping", &s.final_logit_softcapping));
  const json rp = present(j, "rope_parameters") ? j.at("rope_parameters") : json::object();
  if (rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention"))) {
    // transformers 5.x: one dict per layer type.
    for (const char* t : {"full_attention", "sliding_attention"}) {
      if (!present(rp, t)) return invalid_argument(str("field 'rope_parameters' has no '", t, "' entry"));
    }
    RLM_RETURN_IF_ERROR(parse_rope_dict(rp.at("full_attention"), "full_attention", c.max_position_embeddings,
                                        &s.global_rope));
    RLM_RETURN_IF_ERROR(parse_rope_dict(rp.at("sliding_attention"), "sliding_attention",
                                        c.max_position_embeddings, &s.local_rope));
  } else {
    // transformers 4.x: rope_theta (+ rope_scaling) for global layers, rope_local_base_freq for local ones.
    s.global_rope = c.rope;
    s.local_rope.rope_theta = 10000.0;
    RLM_RETURN_IF_ERROR(get_positive(j, "rope_local_base_freq", &s.local_rope.rope_theta));
  }
  for (const RopeParameters* r : {&s.global_rope, &s.local_rope}) {
    if (r->partial_rotary_factor != 1.0) return unimplemented("Gemma3 with a partial_rotary_factor is not supported");
  }
  return s;
}

StatusOr<std::unique_ptr<CausalLM>> Gemma3ForCausalLM::create(const ModelConfig& config, WeightSource& weights) {
  RLM_ASSIGN_OR_RETURN(Gemma3Spec spec, parse_gemma3_spec(config));
  std::unique_ptr<Gemma3ForCausalLM> m(new Gemma3ForCausalLM(config, std::move(spec)));
  RLM_RETURN_IF_ERROR(m->load(weights));
  return std::unique_ptr<CausalLM>(std::move(m));
}

StatusOr<std::unique_ptr<CausalLM>> create_gemma3(const ModelConfig& config, WeightSource& weights) {
  return Gemma3ForCausalLM::create(config, weights);
}

namespace {

// The text model's tensors of a Gemma3ForConditionalGeneration checkpoint under the names
// Gemma3ForCausalLM asks for ("model.X", "lm_head.weight").
class LanguageModelWeights : public WeightSource {
 public:
  explicit LanguageModelWeights(WeightSource& base) : base_(base) { load_options = base.load_options; }

  bool has(const std::string& name) const override { return base_.has(stored(name)); }
  StatusOr<Tensor> get(const std::string& name, const Shape& shape) override {
    return base_.get(stored(name), shape);
  }
  std::vector<std::string> names() const override { return base_.names(); }
  bool synthesizes_any_name() const override { return base_.synthesizes_any_name(); }
  std::string describe() const override {
    return base_.describe() + " (text model of Gemma3ForConditionalGeneration)";
  }

 private:
  // transformers' saved layout first, then the in-memory one; a name in neither is asked for in
  // the saved layout (so a missing tensor is reported under the name the file would use).
  std::string stored(const std::string& name) const {
    std::vector<std::string> candidates;
    if (name.rfind("model.", 0) == 0) {
      const std::string rest = name.substr(6);
      candidates = {"language_model.model." + rest, "model.language_model." + rest};
    } else if (name.rfind("lm_head.", 0) == 0) {
      candidates = {"language_model." + name, name};
    } else {
      return name;
    }
    for (const std::string& c : candidates) {
      if (base_.has(c)) return c;
    }
    return candidates[0];
  }

  WeightSource& base_;
};

}  // namespace

StatusOr<std::unique_ptr<CausalLM>> create_gemma3_conditional(const ModelConfig& config,
                                                              WeightSource& weights) {
  LanguageModelWeights text(weights);
  return Gemma3ForCausalLM::create(config, text);
}

KVShape Gemma3ForCausalLM::kv_shape() const {
  return {config_.num_hidden_layers, config_.num_key_value_heads, config_.head_dim};
}

Status Gemma3ForCausalLM::load(WeightSource& ws) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, d = c.head_dim, hq = c.num_attention_heads, hk = c.num_key_value_heads;
  const bool bias = c.attention_bias;
  RLM_ASSIGN_OR_RETURN(embed_tokens_, ws.get("model.embed_tokens.weight", {c.vocab_size, hidden}));
  // Gemma3TextScaledWordEmbedding: embed(ids) * embed_scale.to(dtype), in our f32 activations.
  embed_scale_ = static_cast<float>(std::sqrt(static_cast<double>(hidden)));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    DecoderLayer layer;
    RLM_ASSIGN_OR_RETURN(layer.input_layernorm, load_zero_centred_norm(ws, p + ".input_layernorm.weight", hidden));
    RLM_ASSIGN_OR_RETURN(layer.post_attention_layernorm,
                         load_zero_centred_norm(ws, p + ".post_attention_layernorm.weight", hidden));
    RLM_ASSIGN_OR_RETURN(layer.pre_feedforward_layernorm,
                         load_zero_centred_norm(ws, p + ".pre_feedforward_layernorm.weight", hidden));
    RLM_ASSIGN_OR_RETURN(layer.post_feedforward_layernorm,
                         load_zero_centred_norm(ws, p + ".post_feedforward_layernorm.weight", hidden));
    RLM_ASSIGN_OR_RETURN(layer.qkv_proj, load_fused_linear(ws,
                                                           {p + ".self_attn.q_proj", p + ".self_attn.k_proj",
                                                            p + ".self_attn.v_proj"},
                                                           {hq * d, hk * d, hk * d}, hidden, bias));
    RLM_ASSIGN_OR_RETURN(layer.o_proj, load_linear(ws, p + ".self_attn.o_proj", hidden, hq * d, bias));
    RLM_ASSIGN_OR_RETURN(const KvScales kvs, load_kv_scales(ws, p + ".self_attn"));
    kv_scales_.push_back(kvs);
    RLM_ASSIGN_OR_RETURN(layer.q_norm, load_zero_centred_norm(ws, p + ".self_attn.q_norm.weight", d));
    RLM_ASSIGN_OR_RETURN(layer.k_norm, load_zero_centred_norm(ws, p + ".self_attn.k_norm.weight", d));
    RLM_ASSIGN_OR_RETURN(layer.gate_up_proj,
                         load_fused_linear(ws, {p + ".mlp.gate_proj", p + ".mlp.up_proj"},
                                           {c.intermediate_size, c.intermediate_size}, hidden, false));
    RLM_ASSIGN_OR_RETURN(layer.down_proj, load_linear(ws, p + ".mlp.down_proj", hidden, c.intermediate_size, false));
    layer.sliding = c.is_sliding_layer(l);
    layer.attn.layer_id = l;
    layer.attn.num_qo_heads = hq;
    layer.attn.num_kv_heads = hk;
    layer.attn.head_dim = d;
    layer.attn.params.scale = static_cast<float>(1.0 / std::sqrt(spec_.query_pre_attn_scalar));
    layer.attn.params.sliding_window = layer.sliding ? c.sliding_window : -1;
    layers_.push_back(std::move(layer));
  }
  RLM_ASSIGN_OR_RETURN(norm_, load_zero_centred_norm(ws, "model.norm.weight", hidden));
  RLM_ASSIGN_OR_RETURN(lm_head_, load_lm_head(ws, c, embed_tokens_));
  rope_local_ = make_rope_cache(spec_.local_rope, d, c.max_position_embeddings);
  rope_global_ = make_rope_cache(spec_.global_rope, d, c.max_position_embeddings);
  return Status::ok();
}

void Gemma3ForCausalLM::to(Device device) {
  if (device == device_) return;
  const bool tied = lm_head_.storage() == embed_tokens_.storage();
  for (Tensor* t : {&embed_tokens_, &norm_, &rope_local_, &rope_global_}) move_tensor(*t, device);
  for (DecoderLayer& layer : layers_) {
    for (Tensor* t : {&layer.input_layernorm, &layer.post_attention_layernorm, &layer.pre_feedforward_layernorm,
                      &layer.post_feedforward_layernorm, &layer.q_norm, &layer.k_norm}) {
      move_tensor(*t, device);
    }
    for (Linear* l : {&layer.qkv_proj, &layer.o_proj, &layer.gate_up_proj, &layer.down_proj}) move_linear(*l, device);
  }
  if (tied) {
    lm_head_ = embed_tokens_;
  } else {
    move_tensor(lm_head_, device);
  }
  device_ = device;
}

void Gemma3ForCausalLM::attention(const DecoderLayer& layer, const Tensor& x, const ForwardBatch& batch,
                                  const Tensor& out) {
  const ModelConfig& c = config_;
  const int64_t n = x.size(0), d = c.head_dim, hq = c.num_attention_heads, hk = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor qkv = Tensor::empty({n, (hq + 2 * hk) * d}, DType::kF32, x.device());
  apply_linear(layer.qkv_proj, x, qkv);
  const Tensor heads = qkv.view({n, hq + 2 * hk, d});
  const Tensor q = heads.slice(1, 0, hq);                 // [num_tokens, num_qo_heads, head_dim]
  const Tensor k = heads.slice(1, hq, hq + hk);           // [num_tokens, num_kv_heads, head_dim]
  const Tensor v = heads.slice(1, hq + hk, hq + 2 * hk);  // [num_tokens, num_kv_heads, head_dim]
  // The q/k norms, RoPE, the KV store and attention: [num_tokens, num_qo_heads, head_dim]
  const QkPrologue prologue{&batch.positions, layer.sliding ? &rope_local_ : &rope_global_,
                            /*is_neox=*/true, &layer.q_norm,
                            &layer.k_norm,    eps};
  Tensor attn = batch.attn_backend->forward_rotary(q, k, v, prologue, layer.attn, batch);
  apply_linear(layer.o_proj, attn.view({n, hq * d}), out);
}

Tensor Gemma3ForCausalLM::forward(const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t n = batch.num_tokens, hidden = c.hidden_size, inter = c.intermediate_size;
  RLM_CHECK(batch.attn_backend != nullptr) << "ForwardBatch without an attention backend";
  const Device dev = batch.input_ids.device();
  RLM_CHECK(dev == device_) << "batch on " << dev.to_string() << " but the model is on " << device_.to_string();

  Tensor hidden_states = Tensor::empty({n, hidden}, DType::kF32, dev);  // [num_tokens, hidden]
  Tensor residual = Tensor::empty({n, hidden}, DType::kF32, dev);       // [num_tokens, hidden]
  Tensor out = Tensor::empty({n, hidden}, DType::kF32, dev);            // [num_tokens, hidden] sublayer output
  Tensor gate_up = Tensor::empty({n, 2 * inter}, DType::kF32, dev);     // [num_tokens, 2 * intermediate]
  Tensor act = Tensor::empty({n, inter}, DType::kF32, dev);             // [num_tokens, intermediate]
  ops::embedding(batch.input_ids, embed_tokens_, hidden_states);
  ops::scale(hidden_states, embed_scale_);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DecoderLayer& layer = layers_[l];
    // hidden_states: the embedding, or the previous layer's normed MLP output.
    residual_input_norm(l, hidden_states, residual, layer.input_layernorm, eps);
    attention(layer, hidden_states, batch, out);
    ops::rms_norm(out, layer.post_attention_layernorm, eps, out);
    ops::fused_add_rms_norm(out, residual, layer.pre_feedforward_layernorm, eps);
    apply_linear(layer.gate_up_proj, out, gate_up);
    ops::gelu_tanh_and_mul(gate_up, act);
    apply_linear(layer.down_proj, act, hidden_states);
    ops::rms_norm(hidden_states, layer.post_feedforward_layernorm, eps, hidden_states);
  }
  ops::fused_add_rms_norm(hidden_states, residual, norm_, eps);

  Tensor logits = lm_head_logits(hidden_states, batch.logits_indices, lm_head_, c.vocab_size);
  if (spec_.final_logit_softcapping > 0) ops::soft_cap(logits, static_cast<float>(spec_.final_logit_softcapping));
  return logits;
}

}  // namespace rlm
