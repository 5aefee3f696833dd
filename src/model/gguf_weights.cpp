#include "model/gguf_weights.h"

#include <cmath>
#include <cstring>
#include <map>
#include <numbers>

#include "formats/gguf_dequant.h"

namespace rlm {

namespace {

// ---- architectures ----------------------------------------------------------------------------

struct GgufArch {
  const char* name;          // general.architecture, also the metadata key prefix
  const char* hf_arch;       // ModelConfig::architecture
  const char* model_type;
  bool permuted_qk;          // llama.cpp's converter permuted q/k rows
  bool norm_plus_one;        // llama.cpp's converter stored Gemma's zero-centred norm weights as 1 + w
};

constexpr GgufArch kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true, false},
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false, false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false, false},
    {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", false, false},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text", false, true},
};

StatusOr<GgufArch> find_arch(const GgufFile& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch) {
    return invalid_argument(str("gguf ", f.path(), ": metadata 'general.architecture' is missing or not a string"));
  }
  for (const GgufArch& a : kArchs) {
    if (*arch == a.name) return a;
  }
  return unimplemented(str("gguf ", f.path(), ": architecture '", *arch,
                           "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gemma3)"));
}

// ---- config ---------------------------------------------------------------------------------

Status bad_key(const GgufFile& f, const std::string& key, const std::string& why) {
  return invalid_argument(str("gguf ", f.path(), ": metadata '", key, "' ", why));
}

StatusOr<int64_t> required_int(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return bad_key(f, key, "is missing");
  auto i = v->as_int();
  if (!i || *i <= 0) return bad_key(f, key, str("must be a positive integer, got ", v->describe()));
  return *i;
}

StatusOr<int64_t> optional_int(const GgufFile& f, const std::string& key, int64_t fallback) {
  if (!f.has(key)) return fallback;
  return required_int(f, key);
}

// A per-layer value may be stored as an array (one entry per layer); all entries must agree.
StatusOr<int64_t> uniform_int(const GgufFile& f, const std::string& key, int64_t fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr || v->type() != GgufValueType::kArray) return optional_int(f, key, fallback);
  auto values = f.get_int_array(key);
  if (!values || values->empty()) return bad_key(f, key, str("must be integers, got ", v->describe()));
  for (int64_t x : *values) {
    if (x != (*values)[0]) return unimplemented(str("gguf ", f.path(), ": per-layer '", key, "' values differ"));
  }
  if ((*values)[0] <= 0) return bad_key(f, key, "must be positive");
  return (*values)[0];
}

StatusOr<double> float_or(const GgufFile& f, const std::string& key, double fallback) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  auto d = v->as_float();
  if (!d || !std::isfinite(*d) || *d <= 0) return bad_key(f, key, str("must be a positive number, got ", v->describe()));
  return *d;
}

// llama3 rope frequency factors (as llama.cpp's converter writes rope_freqs.weight: the ratio of
// the unscaled to the scaled inverse frequency) for `half` = rotary_dim / 2 frequencies.
std::vector<double> llama3_rope_factors(const RopeParameters& r, int64_t rotary_dim) {
  std::vector<double> out;
  const double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
  const double high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
  for (int64_t i = 0; i < rotary_dim; i += 2) {
    const double freq = 1.0 / std::pow(r.rope_theta, static_cast<double>(i) / rotary_dim);
    const double wavelen = 2 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0);
    } else if (wavelen > low_wavelen) {
      out.push_back(r.factor);
    } else {
      const double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                            (r.high_freq_factor - r.low_freq_factor);
      out.push_back(1.0 / ((1 - smooth) / r.factor + smooth));
    }
  }
  return out;
}

// llama.cpp stores llama3 rope scaling only as the rope_freqs.weight factors. Recovers the
// parameters by matching the factors against llama3 with Meta's low/high frequency factors (1, 4)
// and original context (llama.rope.scaling.original_context_length, else 8192).
Status match_llama3_rope(const GgufFile& f, const std::string& prefix, const GgufTensorInfo& info, int64_t rotary_dim,
                         RopeParameters* rope) {
  auto K = [&](const char* key) { return prefix + key; };
  auto t = dequantize_tensor(f, info);
  if (!t.is_ok()) return t.status();
  if (t->numel() != rotary_dim / 2) {
    return invalid_argument(str("gguf ", f.path(), ": rope_freqs.weight has ", t->numel(), " values, expected ",
                                rotary_dim / 2, " (rotary dim / 2)"));
  }
  const float* factors = t->data<float>();
  RopeParameters r = *rope;
  r.rope_type = "llama3";
  r.factor = factors[t->numel() - 1];
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  RLM_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                       optional_int(f, K("rope.scaling.original_context_length"), 8192));
  const std::vector<double> want = llama3_rope_factors(r, rotary_dim);
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(factors[i] - want[i]) > 1e-4 * std::fabs(want[i])) {
      return unimplemented(str("gguf ", f.path(), ": rope_freqs.weight[", i, "] = ", factors[i],
                               " does not match llama3 rope scaling (factor ", r.factor, ", low 1, high 4, original ",
                               r.original_max_position_embeddings, ": ", want[i], ")"));
    }
  }
  *rope = r;
  return Status::ok();
}

Status read_rope(const GgufFile& f, const std::string& prefix, int64_t head_dim, ModelConfig* c) {
  auto K = [&](const char* key) { return prefix + key; };
  RopeParameters& rope = c->rope;
  RLM_ASSIGN_OR_RETURN(rope.rope_theta, float_or(f, K("rope.freq_base"), 10000.0));
  RLM_ASSIGN_OR_RETURN(int64_t rotary_dim, optional_int(f, K("rope.dimension_count"), head_dim));
  if (rotary_dim > head_dim || rotary_dim % 2 != 0) {
    return bad_key(f, K("rope.dimension_count"), str("= ", rotary_dim, " must be even and <= head_dim ", head_dim));
  }
  rope.partial_rotary_factor = static_cast<double>(rotary_dim) / static_cast<double>(head_dim);
  std::string type = f.get_string(K("rope.scaling.type")).value_or("");
  RLM_ASSIGN_OR_RETURN(double factor, float_or(f, K("rope.scaling.factor"), 1.0));
  if (type.empty() && f.has(K("rope.scale_linear"))) {  // older files
    RLM_ASSIGN_OR_RETURN(factor, float_or(f, K("rope.scale_linear"), 1.0));
    type = factor != 1.0 ? "linear" : "none";
  }
  if (type == "linear") {
    rope.rope_type = "linear";
    rope.factor = factor;
  } else if (!type.empty() && type != "none") {
    return unimplemented(str("gguf ", f.path(), ": rope scaling type '", type, "' is not supported (none, linear)"));
  }
  if (const GgufTensorInfo* freqs = f.find_tensor("rope_freqs.weight")) {
    if (rope.rope_type != "default") {
      return unimplemented(str("gguf ", f.path(), ": rope_freqs.weight together with rope scaling '", type, "'"));
    }
    RLM_RETURN_IF_ERROR(match_llama3_rope(f, prefix, *freqs, rotary_dim, &rope));
  }
  return Status::ok();
}

nlohmann::json hf_config_json(const ModelConfig& c) {
  nlohmann::json j = {
      {"architectures", {c.architecture}},
      {"model_type", c.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", c.mlp_bias},
      {"hidden_act", c.hidden_act},
      {"torch_dtype", "float32"},
  };
  if (c.rope.rope_type != "default") {
    j["rope_scaling"] = {{"rope_type", c.rope.rope_type}, {"factor", c.rope.factor}};
    if (c.rope.rope_type == "llama3") {
      j["rope_scaling"]["low_freq_factor"] = c.rope.low_freq_factor;
      j["rope_scaling"]["high_freq_factor"] = c.rope.high_freq_factor;
      j["rope_scaling"]["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
    }
  }
  if (c.rope.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.rope.partial_rotary_factor;
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  return j;
}

// qwen3moe: the MoE fields (model/moe.h) into the HF config. llama.cpp's qwen3moe graph always
// renormalises the top-k weights (transformers' GGUF loader sets norm_topk_prob for it too); a
// layer without blk.N.ffn_gate_inp is a dense MLP (mlp_only_layers).
Status read_moe(const GgufFile& f, const std::string& prefix, ModelConfig* c) {
  RLM_ASSIGN_OR_RETURN(int64_t experts, required_int(f, prefix + "expert_count"));
  RLM_ASSIGN_OR_RETURN(int64_t used, required_int(f, prefix + "expert_used_count"));
  RLM_ASSIGN_OR_RETURN(int64_t inter, required_int(f, prefix + "expert_feed_forward_length"));
  if (used > experts) {
    return bad_key(f, prefix + "expert_used_count", str("= ", used, " exceeds expert_count ", experts));
  }
  nlohmann::json mlp_only = nlohmann::json::array();
  for (int64_t l = 0; l < c->num_hidden_layers; ++l) {
    if (f.find_tensor(str("blk.", l, ".ffn_gate_inp.weight")) == nullptr) mlp_only.push_back(l);
  }
  c->raw["num_experts"] = experts;
  c->raw["num_experts_per_tok"] = used;
  c->raw["moe_intermediate_size"] = inter;
  c->raw["norm_topk_prob"] = true;
  c->raw["mlp_only_layers"] = mlp_only;
  return Status::ok();
}

// gemma3, as llama.cpp runs it: every 6th layer global, the others within
// gemma3.attention.sliding_window; local layers use RoPE base 10000 unscaled, global ones
// rope.freq_base and the rope scaling; GeLU-tanh MLPs.
Status read_gemma3(const GgufFile& f, const std::string& prefix, ModelConfig* c) {
  RLM_ASSIGN_OR_RETURN(c->sliding_window, optional_int(f, prefix + "attention.sliding_window", 4096));
  for (int64_t l = 0; l < c->num_hidden_layers; ++l) {
    c->layer_types.push_back((l + 1) % 6 != 0 ? "sliding_attention" : "full_attention");
  }
  c->hidden_act = "gelu_pytorch_tanh";
  return Status::ok();
}

// llama.cpp's attention scale for gemma3: 1/sqrt(head_dim), except for the 27B model (62 layers):
// 1/sqrt(hidden / heads). The HF config's query_pre_attn_scalar is the square root's argument.
double gemma3_query_pre_attn_scalar(const ModelConfig& c) {
  if (c.num_hidden_layers == 62) return static_cast<double>(c.hidden_size / c.num_attention_heads);
  return static_cast<double>(c.head_dim);
}

// ---- names ----------------------------------------------------------------------------------

// HF name -> GGUF name for every tensor of `file` that has one. The names without a ".weight"
// suffix are the stacked [num_experts, rows, cols] MoE tensors (model/moe.h).
std::map<std::string, std::string> hf_name_map(const GgufFile& file, const GgufArch& arch) {
  static const std::map<std::string, std::string> kGlobal = {
      {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
  static const std::map<std::string, std::string> kLlamaLayer = {
      {"attn_norm", "input_layernorm"},  {"ffn_norm", "post_attention_layernorm"},
      {"attn_q", "self_attn.q_proj"},    {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},    {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},     {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},     {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"}, {"ffn_gate_inp", "mlp.gate"}};
  // Gemma3: norms after attention and around the MLP.
  static const std::map<std::string, std::string> kGemmaNorms = {
      {"post_attention_norm", "post_attention_layernorm"}, {"ffn_norm", "pre_feedforward_layernorm"},
      {"post_ffw_norm", "post_feedforward_layernorm"}};
  static const std::map<std::string, std::string> kExperts = {
      {"ffn_gate_exps", "mlp.experts.gate_proj"}, {"ffn_up_exps", "mlp.experts.up_proj"},
      {"ffn_down_exps", "mlp.experts.down_proj"}};
  std::map<std::string, std::string> layer_names = kLlamaLayer;
  if (arch.norm_plus_one) {
    for (const auto& [g, hf] : kGemmaNorms) layer_names[g] = hf;
  }
  std::map<std::string, std::string> out;
  for (const GgufTensorInfo& t : file.tensors()) {
    const size_t dot = t.name.rfind('.');
    if (dot == std::string::npos) continue;
    const std::string stem = t.name.substr(0, dot), suffix = t.name.substr(dot);  // ".weight"/".bias"
    if (suffix != ".weight" && suffix != ".bias") continue;
    if (auto it = kGlobal.find(stem); it != kGlobal.end()) {
      out[it->second + suffix] = t.name;
      continue;
    }
    if (stem.rfind("blk.", 0) != 0) continue;
    const size_t dot2 = stem.find('.', 4);
    if (dot2 == std::string::npos) continue;
    const std::string layer = stem.substr(4, dot2 - 4);
    if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string g = stem.substr(dot2 + 1);
    if (auto it = layer_names.find(g); it != layer_names.end()) {
      out["model.layers." + layer + "." + it->second + suffix] = t.name;
    } else if (auto e = kExperts.find(g); e != kExperts.end() && suffix == ".weight") {
      out["model.layers." + layer + "." + e->second] = t.name;
    }
  }
  return out;
}

class GgufWeightSource : public WeightSource {
 public:
  // `num_heads` / `num_kv_heads` > 0: un-permute q/k rows (llama); 0: serve them as stored.
  GgufWeightSource(std::shared_ptr<GgufFile> file, const GgufArch& arch, int64_t num_heads, int64_t num_kv_heads,
                   DType dtype, GgufWeights mode)
      : file_(std::move(file)),
        names_(hf_name_map(*file_, arch)),
        norm_plus_one_(arch.norm_plus_one),
        num_heads_(num_heads),
        num_kv_heads_(num_kv_heads),
        dtype_(dtype),
        mode_(mode) {}

  bool has(const std::string& name) const override { return names_.count(name) != 0; }

  StatusOr<Tensor> get(const std::string& name, const Shape& expected_shape) override {
    auto it = names_.find(name);
    if (it == names_.end()) return not_found(str("tensor '", name, "' not found in ", describe()));
    const GgufTensorInfo& info = *file_->find_tensor(it->second);
    if (info.shape != expected_shape) {
      return invalid_argument(str("tensor '", name, "' (gguf '", info.name, "') in ", describe(), " has shape ",
                                  shape_to_string(info.shape), ", expected ", shape_to_string(expected_shape)));
    }
    RLM_ASSIGN_OR_RETURN(Tensor t, load(info));
    if (norm_plus_one_ && t.dim() == 1 && name.find("norm.weight") != std::string::npos) {
      t = minus_one(t);  // back to the Hugging Face weight w (the model multiplies by 1 + w again)
    }
    const bool is_q = num_heads_ > 0 && name.find(".self_attn.q_proj.") != std::string::npos;
    const bool is_k = num_heads_ > 0 && name.find(".self_attn.k_proj.") != std::string::npos;
    if (is_q || is_k) {
      const int64_t heads = is_q ? num_heads_ : num_kv_heads_;
      if (t.size(0) % (2 * heads) != 0) {
        return invalid_argument(str("tensor '", name, "' in ", describe(), ": ", t.size(0),
                                    " rows do not split into ", heads, " heads of even size"));
      }
      t = unpermute_llama_qk(t, heads);
    }
    return t.dtype() == dtype_ || mode_ == GgufWeights::kQuantized ? t : t.to(dtype_);
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [hf, gguf] : names_) out.push_back(hf);
    return out;
  }

  std::string describe() const override { return str("gguf: ", file_->path(), " (", file_->tensors().size(), " tensors)"); }

 private:
  // The tensor as stored (a view of the mapping) when kept quantized, else dequantized to f32.
  StatusOr<Tensor> load(const GgufTensorInfo& info) const {
    const std::optional<DType> stored = dtype_of_ggml_type(info.type);
    // Matrices keep their stored type; stacked 3-D expert tensors keep block types (float ones are
    // dequantized to f32, as the MoE experts take one float dtype for both projections).
    const bool matrix = info.shape.size() == 2 && stored && *stored != DType::kF32;
    const bool experts = info.shape.size() == 3 && stored && is_quantized(*stored);
    if (mode_ == GgufWeights::kQuantized && (matrix || experts)) {
      std::span<const uint8_t> data = file_->tensor_data(info);
      return Tensor::from_blob(const_cast<uint8_t*>(data.data()), info.shape, *stored, Device::cpu(), file_);
    }
    return dequantize_tensor(*file_, info);
  }

  // w = stored - 1 in f32, as transformers' GGUF loader computes it (1-D norm weights, f32).
  static Tensor minus_one(const Tensor& stored) {
    Tensor w = stored.to(DType::kF32).contiguous().clone();
    float* p = w.data<float>();
    for (int64_t i = 0; i < w.numel(); ++i) p[i] -= 1.0f;
    return w;
  }

  std::shared_ptr<GgufFile> file_;
  std::map<std::string, std::string> names_;  // HF name -> GGUF name
  bool norm_plus_one_;
  int64_t num_heads_;
  int64_t num_kv_heads_;
  DType dtype_;
  GgufWeights mode_;
};

}  // namespace

StatusOr<ModelConfig> gguf_model_config(const GgufFile& f) {
  RLM_ASSIGN_OR_RETURN(GgufArch arch, find_arch(f));
  const std::string prefix = std::string(arch.name) + ".";
  auto K = [&](const char* key) { return prefix + key; };
  ModelConfig c;
  c.architecture = arch.hf_arch;
  c.model_type = arch.model_type;
  c.dtype = DType::kF32;
  RLM_ASSIGN_OR_RETURN(c.hidden_size, required_int(f, K("embedding_length")));
  RLM_ASSIGN_OR_RETURN(c.num_hidden_layers, required_int(f, K("block_count")));
  if (c.num_hidden_layers > (1 << 16)) {  // as parse_model_config: far above any model, below a corrupt count
    return bad_key(f, K("block_count"), str("= ", c.num_hidden_layers, " exceeds ", 1 << 16));
  }
  RLM_ASSIGN_OR_RETURN(c.intermediate_size, uniform_int(f, K("feed_forward_length"), 0));
  if (c.intermediate_size <= 0 && f.has(K("expert_feed_forward_length"))) {  // an all-MoE file: unused
    RLM_ASSIGN_OR_RETURN(c.intermediate_size, required_int(f, K("expert_feed_forward_length")));
  }
  if (c.intermediate_size <= 0) return bad_key(f, K("feed_forward_length"), "is missing");
  RLM_ASSIGN_OR_RETURN(c.num_attention_heads, uniform_int(f, K("attention.head_count"), 0));
  if (c.num_attention_heads <= 0) return bad_key(f, K("attention.head_count"), "is missing");
  RLM_ASSIGN_OR_RETURN(c.num_key_value_heads, uniform_int(f, K("attention.head_count_kv"), c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return bad_key(f, K("attention.head_count_kv"),
                   str("= ", c.num_key_value_heads, " does not divide head_count ", c.num_attention_heads));
  }
  const int64_t default_head_dim = c.hidden_size / c.num_attention_heads;
  RLM_ASSIGN_OR_RETURN(c.head_dim, optional_int(f, K("attention.key_length"), default_head_dim));
  RLM_ASSIGN_OR_RETURN(int64_t value_dim, optional_int(f, K("attention.value_length"), c.head_dim));
  if (value_dim != c.head_dim) {
    return unimplemented(str("gguf ", f.path(), ": attention key_length ", c.head_dim, " != value_length ", value_dim));
  }
  if (!f.has(K("attention.key_length")) && c.hidden_size % c.num_attention_heads != 0) {
    return bad_key(f, K("attention.head_count"),
                   str("= ", c.num_attention_heads, " does not divide embedding_length ", c.hidden_size));
  }
  RLM_ASSIGN_OR_RETURN(c.max_position_embeddings, required_int(f, K("context_length")));
  if (!f.has(K("attention.layer_norm_rms_epsilon"))) {
    return bad_key(f, K("attention.layer_norm_rms_epsilon"), "is missing");
  }
  RLM_ASSIGN_OR_RETURN(c.rms_norm_eps, float_or(f, K("attention.layer_norm_rms_epsilon"), 0.0));
  RLM_RETURN_IF_ERROR(read_rope(f, prefix, c.head_dim, &c));

  // vocab: the embedding's rows are authoritative (they may be padded past the token list).
  if (const GgufTensorInfo* embd = f.find_tensor("token_embd.weight")) {
    if (embd->shape.size() != 2 || embd->shape[1] != c.hidden_size) {
      return invalid_argument(str("gguf ", f.path(), ": token_embd.weight has shape ", shape_to_string(embd->shape),
                                  ", expected [vocab, ", c.hidden_size, "]"));
    }
    c.vocab_size = embd->shape[0];
  } else if (f.has(K("vocab_size"))) {
    RLM_ASSIGN_OR_RETURN(c.vocab_size, required_int(f, K("vocab_size")));
  } else if (const GgufValue* tokens = f.find("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(tokens->array_size());
  }
  if (c.vocab_size <= 0) {
    return invalid_argument(str("gguf ", f.path(), ": no vocab size (token_embd.weight, ", K("vocab_size"), ", tokenizer.ggml.tokens)"));
  }
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.mlp_bias = f.find_tensor("blk.0.ffn_up.bias") != nullptr;

  auto token_id = [&](const std::string& key) -> StatusOr<std::optional<int64_t>> {
    const GgufValue* v = f.find(key);
    if (v == nullptr) return std::optional<int64_t>();
    auto id = v->as_int();
    if (!id || *id < 0 || *id >= c.vocab_size) {
      return bad_key(f, key, str("must be a token id below the vocab size ", c.vocab_size, ", got ", v->describe()));
    }
    return std::optional<int64_t>(*id);
  };
  RLM_ASSIGN_OR_RETURN(c.bos_token_id, token_id("tokenizer.ggml.bos_token_id"));
  RLM_ASSIGN_OR_RETURN(c.pad_token_id, token_id("tokenizer.ggml.padding_token_id"));
  RLM_ASSIGN_OR_RETURN(std::optional<int64_t> eos, token_id("tokenizer.ggml.eos_token_id"));
  RLM_ASSIGN_OR_RETURN(std::optional<int64_t> eot, token_id("tokenizer.ggml.eot_token_id"));
  if (eos) c.eos_token_ids.push_back(*eos);
  if (eot && eot != eos) c.eos_token_ids.push_back(*eot);
  if (std::string(arch.name) == "gemma3") RLM_RETURN_IF_ERROR(read_gemma3(f, prefix, &c));
  c.raw = hf_config_json(c);
  if (std::string(arch.name) == "qwen3moe") RLM_RETURN_IF_ERROR(read_moe(f, prefix, &c));
  if (std::string(arch.name) == "gemma3") {
    c.raw.erase("hidden_act");
    c.raw["hidden_activation"] = c.hidden_act;
    c.raw["sliding_window"] = c.sliding_window;
    c.raw["layer_types"] = c.layer_types;
    c.raw["rope_local_base_freq"] = 10000.0;
    c.raw["query_pre_attn_scalar"] = gemma3_query_pre_attn_scalar(c);
    if (f.has(K("final_logit_softcapping"))) {
      RLM_ASSIGN_OR_RETURN(double cap, float_or(f, K("final_logit_softcapping"), 0.0));
      c.raw["final_logit_softcapping"] = cap;
    }
  }
  return c;
}

Tensor unpermute_llama_qk(const Tensor& w, int64_t num_heads) {
  RLM_CHECK(w.dim() == 1 || w.dim() == 2) << "unpermute_llama_qk expects [rows] or [rows, in], got " << w.describe();
  const int64_t rows = w.size(0);
  RLM_CHECK(num_heads > 0 && rows % (2 * num_heads) == 0) << rows << " rows, " << num_heads << " heads";
  const int64_t head_dim = rows / num_heads, half = head_dim / 2;
  const size_t row_bytes = dtype_nbytes(w.dtype(), w.numel() / rows);
  Tensor src = w.contiguous();
  Tensor out = Tensor::empty(w.shape(), w.dtype());
  const auto* s = static_cast<const uint8_t*>(src.data_ptr());
  auto* d = static_cast<uint8_t*>(out.data_ptr());
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t p = 0; p < 2; ++p) {
        const int64_t from = h * head_dim + 2 * i + p, to = h * head_dim + p * half + i;
        std::memcpy(d + to * row_bytes, s + from * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

StatusOr<std::unique_ptr<WeightSource>> open_gguf_weights(std::shared_ptr<GgufFile> file, DType dtype,
                                                          GgufWeights mode) {
  RLM_CHECK(file != nullptr);
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return invalid_argument(str("open_gguf_weights: dtype ", dtype_name(dtype), " is not a float dtype (f32, bf16, f16)"));
  }
  if (mode == GgufWeights::kQuantized && dtype != DType::kF32) {
    return invalid_argument(str("open_gguf_weights: weights kept quantized come with f32 vectors, not ", dtype_name(dtype)));
  }
  RLM_ASSIGN_OR_RETURN(ModelConfig c, gguf_model_config(*file));
  RLM_ASSIGN_OR_RETURN(GgufArch arch, find_arch(*file));
  const int64_t heads = arch.permuted_qk ? c.num_attention_heads : 0;
  const int64_t kv_heads = arch.permuted_qk ? c.num_key_value_heads : 0;
  return std::unique_ptr<WeightSource>(
      std::make_unique<GgufWeightSource>(std::move(file), arch, heads, kv_heads, dtype, mode));
}

}  // namespace rlm
