#include "model/model_config.h"

#include <algorithm>
#include <filesystem>

#include "core/json.h"

namespace rlm {
namespace {

using nlohmann::json;

// Which layers of a model_type slide, as transformers' modeling code decides.
enum class SlidingRule {
  kNone,       // LlamaForCausalLM: `sliding_window` in config.json is ignored (LlamaAttention has none)
  kAllLayers,  // Mistral (and unknown types): every layer, when the window is set (and
               // use_sliding_window, if present, is true)
  kQwen,       // Qwen2/Qwen3: use_sliding_window (default false); layers >= max_window_layers (28)
  kQwenMoe,    // Qwen3-MoE: use_sliding_window (default false); every layer
  kPattern,    // Gemma3: layer_types, else every sliding_window_pattern-th layer (6) is global
};

// What transformers' config class for a model_type assumes when config.json leaves a field out.
struct TypeDefaults {
  int64_t max_position_embeddings = 2048;
  std::optional<int64_t> num_key_value_heads;  // nullopt: num_attention_heads
  std::optional<int64_t> head_dim;             // nullopt: hidden_size / num_attention_heads
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  SlidingRule sliding = SlidingRule::kAllLayers;
  std::optional<int64_t> sliding_window;  // the window when config.json has no `sliding_window` key
  bool always_qkv_bias = false;
  bool tie_word_embeddings = false;
  const char* act_key = "hidden_act";  // Gemma: hidden_activation
  const char* act = "silu";            // the only activation the type's models run
};

TypeDefaults defaults_for(const std::string& model_type) {
  TypeDefaults d;
  if (model_type == "qwen2" || model_type == "qwen3") {
    d.max_position_embeddings = 32768;
    d.num_key_value_heads = 32;
    d.sliding = SlidingRule::kQwen;
    d.sliding_window = 4096;
    if (model_type == "qwen2") d.always_qkv_bias = true;  // Qwen2Attention: bias=True
    if (model_type == "qwen3") d.head_dim = 128;
  } else if (model_type == "qwen3_moe") {
    d.max_position_embeddings = 32768;
    d.num_key_value_heads = 4;
    d.sliding = SlidingRule::kQwenMoe;
    d.sliding_window = 4096;
  } else if (model_type == "mistral") {
    d.max_position_embeddings = 4096 * 32;
    d.num_key_value_heads = 8;
    d.bos_token_id = 1;
    d.eos_token_ids = {2};
    d.sliding_window = 4096;
  } else if (model_type == "gemma3_text") {
    d.max_position_embeddings = 131072;
    d.num_key_value_heads = 4;
    d.head_dim = 256;
    d.bos_token_id = 2;
    d.eos_token_ids = {1};
    d.pad_token_id = 0;
    d.sliding = SlidingRule::kPattern;
    d.sliding_window = 4096;
    d.tie_word_embeddings = true;
    d.act_key = "hidden_activation";
    d.act = "gelu_pytorch_tanh";
  } else {  // LlamaConfig
    d.bos_token_id = 1;
    d.eos_token_ids = {2};
    if (model_type == "llama") d.sliding = SlidingRule::kNone;
  }
  return d;
}

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// Absent or null: nullopt. Present but not an integer: an error naming the field.
Status get_int(const json& j, const char* key, std::optional<int64_t>* out) {
  out->reset();
  if (!present(j, key)) return Status::ok();
  const json& v = j.at(key);
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return invalid_argument(str("field '", key, "' is too large: ", v.dump()));
    *out = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else {
    return invalid_argument(str("field '", key, "' must be an integer, got ", v.dump()));
  }
  return Status::ok();
}

Status get_double(const json& j, const char* key, std::optional<double>* out) {
  out->reset();
  if (!present(j, key)) return Status::ok();
  const json& v = j.at(key);
  if (!v.is_number()) return invalid_argument(str("field '", key, "' must be a number, got ", v.dump()));
  *out = v.get<double>();
  return Status::ok();
}

Status get_bool(const json& j, const char* key, bool default_value, bool* out) {
  *out = default_value;
  if (!present(j, key)) return Status::ok();
  const json& v = j.at(key);
  if (!v.is_boolean()) return invalid_argument(str("field '", key, "' must be true or false, got ", v.dump()));
  *out = v.get<bool>();
  return Status::ok();
}

Status get_string(const json& j, const char* key, std::optional<std::string>* out) {
  out->reset();
  if (!present(j, key)) return Status::ok();
  const json& v = j.at(key);
  if (!v.is_string()) return invalid_argument(str("field '", key, "' must be a string, got ", v.dump()));
  *out = v.get<std::string>();
  return Status::ok();
}

// Upper bounds of the sizes, far above any real model, so that a corrupt config fails here rather
// than in an allocation sized by it (layer_types has num_hidden_layers entries; token ids are int32).
int64_t max_size(const char* key) {
  const std::string k = key;
  if (k == "vocab_size") return INT32_MAX;
  if (k == "num_hidden_layers") return 1 << 16;
  if (k == "max_position_embeddings") return int64_t{1} << 32;
  return 1 << 24;  // hidden/intermediate sizes, heads, head_dim
}

Status check_size(const char* key, int64_t v) {
  if (v <= 0) return invalid_argument(str("field '", key, "' must be positive, got ", v));
  if (v > max_size(key)) return invalid_argument(str("field '", key, "' is too large: ", v, " > ", max_size(key)));
  return Status::ok();
}

// A required size: present, an integer, > 0 and within max_size.
Status get_size(const json& j, const char* key, int64_t* out) {
  std::optional<int64_t> v;
  RLM_RETURN_IF_ERROR(get_int(j, key, &v));
  if (!v) return invalid_argument(str("missing required field '", key, "'"));
  RLM_RETURN_IF_ERROR(check_size(key, *v));
  *out = *v;
  return Status::ok();
}

// An optional size: absent/null gives `fallback`; present must be > 0 and within max_size.
Status get_optional_size(const json& j, const char* key, int64_t fallback, int64_t* out) {
  std::optional<int64_t> v;
  RLM_RETURN_IF_ERROR(get_int(j, key, &v));
  if (v) RLM_RETURN_IF_ERROR(check_size(key, *v));
  *out = v.value_or(fallback);
  return Status::ok();
}

Status get_token_id(const json& j, const char* key, std::optional<int64_t> fallback,
                    std::optional<int64_t>* out) {
  if (!j.contains(key)) {
    *out = fallback;
    return Status::ok();
  }
  RLM_RETURN_IF_ERROR(get_int(j, key, out));
  if (*out && **out < 0) out->reset();  // some old configs write -1 for "none"
  return Status::ok();
}

Status parse_eos(const json& j, const TypeDefaults& d, std::vector<int64_t>* out) {
  if (!j.contains("eos_token_id")) {
    *out = d.eos_token_ids;
    return Status::ok();
  }
  const json& v = j.at("eos_token_id");
  out->clear();
  if (v.is_null()) return Status::ok();
  if (v.is_number_integer()) {
    out->push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_number_integer())
        return invalid_argument(str("field 'eos_token_id' must be an integer or a list of integers, got ", v.dump()));
      out->push_back(e.get<int64_t>());
    }
  } else {
    return invalid_argument(str("field 'eos_token_id' must be an integer or a list of integers, got ", v.dump()));
  }
  for (int64_t id : *out)
    if (id < 0) return invalid_argument(str("field 'eos_token_id' has a negative id ", id));
  return Status::ok();
}

// transformers' RotaryEmbeddingConfigMixin: `rope_scaling` (4.x) wins over `rope_parameters` (5.x);
// rope_theta / partial_rotary_factor come from that dict, else the top level, else the defaults.
Status parse_rope_fields(const json& j, int64_t max_position_embeddings, RopeParameters* rope) {
  json src = json::object();
  const char* src_name = "rope_parameters";
  if (present(j, "rope_scaling") && !(j.at("rope_scaling").is_object() && j.at("rope_scaling").empty())) {
    src = j.at("rope_scaling");
    src_name = "rope_scaling";
  } else if (present(j, "rope_parameters")) {
    src = j.at("rope_parameters");
  }
  if (!src.is_object()) return invalid_argument(str("field '", src_name, "' must be an object, got ", src.dump()));
  auto field = [&](const char* key) { return str(src_name, ".", key); };
  auto prefixed = [&](Status s) {
    return s.is_ok() ? s : Status(s.code(), str("in '", src_name, "': ", s.message()));
  };

  std::optional<std::string> type;
  RLM_RETURN_IF_ERROR(prefixed(get_string(src, "rope_type", &type)));
  if (!type) RLM_RETURN_IF_ERROR(prefixed(get_string(src, "type", &type)));
  rope->rope_type = type.value_or("default");

  std::optional<double> theta, partial;
  RLM_RETURN_IF_ERROR(prefixed(get_double(src, "rope_theta", &theta)));
  if (!theta) RLM_RETURN_IF_ERROR(get_double(j, "rope_theta", &theta));
  rope->rope_theta = theta.value_or(10000.0);
  RLM_RETURN_IF_ERROR(prefixed(get_double(src, "partial_rotary_factor", &partial)));
  if (!partial) RLM_RETURN_IF_ERROR(get_double(j, "partial_rotary_factor", &partial));
  rope->partial_rotary_factor = partial.value_or(1.0);
  if (!(rope->rope_theta > 0)) return invalid_argument(str("rope_theta must be positive, got ", rope->rope_theta));
  if (!(rope->partial_rotary_factor > 0 && rope->partial_rotary_factor <= 1))
    return invalid_argument(str("partial_rotary_factor must be in (0, 1], got ", rope->partial_rotary_factor));

  auto required = [&](const char* key, double* out) -> Status {
    std::optional<double> v;
    RLM_RETURN_IF_ERROR(prefixed(get_double(src, key, &v)));
    if (!v) return invalid_argument(str("rope type '", rope->rope_type, "' requires '", field(key), "'"));
    if (!(*v > 0)) return invalid_argument(str("'", field(key), "' must be positive, got ", *v));
    *out = *v;
    return Status::ok();
  };
  if (rope->rope_type == "default") return Status::ok();
  if (rope->rope_type == "linear") return required("factor", &rope->factor);
  if (rope->rope_type == "llama3") {
    RLM_RETURN_IF_ERROR(required("factor", &rope->factor));
    RLM_RETURN_IF_ERROR(required("low_freq_factor", &rope->low_freq_factor));
    RLM_RETURN_IF_ERROR(required("high_freq_factor", &rope->high_freq_factor));
    if (rope->high_freq_factor <= rope->low_freq_factor)
      return invalid_argument(str("'", field("high_freq_factor"), "' (", rope->high_freq_factor,
                                  ") must be greater than low_freq_factor (", rope->low_freq_factor, ")"));
    // A top-level original_max_position_embeddings takes priority (transformers' Phi3 rule), then
    // the dict's, then max_position_embeddings.
    std::optional<int64_t> orig;
    RLM_RETURN_IF_ERROR(get_int(j, "original_max_position_embeddings", &orig));
    if (!orig) RLM_RETURN_IF_ERROR(prefixed(get_int(src, "original_max_position_embeddings", &orig)));
    rope->original_max_position_embeddings = orig.value_or(max_position_embeddings);
    if (rope->original_max_position_embeddings <= 0)
      return invalid_argument(str("original_max_position_embeddings must be positive, got ",
                                  rope->original_max_position_embeddings));
    return Status::ok();
  }
  for (const char* known : {"dynamic", "yarn", "longrope", "su", "proportional", "mrope"})
    if (rope->rope_type == known)
      return unimplemented(str("rope type '", rope->rope_type, "' (", src_name,
                               ") is not supported; supported: default, linear, llama3"));
  return invalid_argument(str("unknown rope type '", rope->rope_type, "' in '", src_name, "'"));
}

Status parse_sliding_window(const json& j, const TypeDefaults& d, ModelConfig* c) {
  const int64_t n = c->num_hidden_layers;
  c->layer_types.assign(static_cast<size_t>(n), "full_attention");
  c->sliding_window = -1;
  // The window and `layer_types` are validated even where the model_type ignores them.
  std::optional<int64_t> window;
  RLM_RETURN_IF_ERROR(get_int(j, "sliding_window", &window));
  if (window && *window <= 0) return invalid_argument(str("field 'sliding_window' must be positive, got ", *window));
  std::vector<std::string> listed;
  if (present(j, "layer_types")) {
    const json& lt = j.at("layer_types");
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != n)
      return invalid_argument(str("field 'layer_types' must be a list of ", n, " strings (num_hidden_layers)"));
    for (const json& t : lt) {
      if (!t.is_string()) return invalid_argument(str("field 'layer_types' has a non-string entry ", t.dump()));
      listed.push_back(t.get<std::string>());
    }
  }
  if (d.sliding == SlidingRule::kNone) return Status::ok();
  if (!j.contains("sliding_window")) window = d.sliding_window;
  const bool qwen = d.sliding == SlidingRule::kQwen || d.sliding == SlidingRule::kQwenMoe;
  if (qwen || j.contains("use_sliding_window")) {  // Qwen: no window unless use_sliding_window
    bool use_sliding = true;
    RLM_RETURN_IF_ERROR(get_bool(j, "use_sliding_window", !qwen, &use_sliding));
    if (!use_sliding) window.reset();
  }
  if (!listed.empty() && d.sliding != SlidingRule::kQwenMoe) {
    c->layer_types = listed;
  } else if (d.sliding == SlidingRule::kPattern) {
    std::optional<int64_t> pattern;
    RLM_RETURN_IF_ERROR(get_int(j, "sliding_window_pattern", &pattern));
    if (pattern && *pattern <= 0)
      return invalid_argument(str("field 'sliding_window_pattern' must be positive, got ", *pattern));
    for (int64_t i = 0; i < n; ++i) {
      if ((i + 1) % pattern.value_or(6) != 0) c->layer_types[i] = "sliding_attention";
    }
  } else {
    std::optional<int64_t> max_window_layers;
    RLM_RETURN_IF_ERROR(get_int(j, "max_window_layers", &max_window_layers));
    const int64_t first_sliding = d.sliding == SlidingRule::kQwen ? max_window_layers.value_or(28) : 0;
    for (int64_t i = std::max<int64_t>(first_sliding, 0); window && i < n; ++i) c->layer_types[i] = "sliding_attention";
  }
  // A "sliding_attention" layer without a window attends to everything.
  bool any_sliding = false;
  for (std::string& t : c->layer_types) {
    if (t == "sliding_attention" && !window) t = "full_attention";
    any_sliding |= t == "sliding_attention";
  }
  c->sliding_window = any_sliding ? *window : -1;
  return Status::ok();
}

Status parse_dtype_field(const json& j, DType* out) {
  const char* key = present(j, "dtype") ? "dtype" : "torch_dtype";
  std::optional<std::string> name;
  RLM_RETURN_IF_ERROR(get_string(j, key, &name));
  if (!name) return Status::ok();  // keep the default
  std::string s = *name;
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  StatusOr<DType> dt = parse_dtype(s);
  if (!dt.is_ok() || !is_floating(dt.value()))
    return unimplemented(str("field '", key, "' is '", *name, "'; supported: float32, float16, bfloat16"));
  *out = dt.value();
  return Status::ok();
}

}  // namespace

Status parse_rope_parameters(const json& j, int64_t max_position_embeddings, RopeParameters* rope) {
  return parse_rope_fields(j, max_position_embeddings, rope);
}

bool ModelConfig::is_sliding_layer(int64_t layer) const {
  if (layer_types.empty()) return false;
  RLM_CHECK(layer >= 0 && layer < static_cast<int64_t>(layer_types.size()))
      << "layer " << layer << " of " << layer_types.size();
  return sliding_window > 0 && layer_types[layer] == "sliding_attention";
}

StatusOr<ModelConfig> parse_model_config(const json& j) {
  if (!j.is_object()) return invalid_argument(str("config must be a JSON object, got ", j.type_name()));
  // Gemma3ForConditionalGeneration: the text model's config is text_config; the tying of the
  // embedding is the outer config's (the model that ties), token ids come from text_config or
  // else the outer config.
  if (present(j, "architectures") && j.at("architectures").is_array() && !j.at("architectures").empty() &&
      j.at("architectures")[0] == "Gemma3ForConditionalGeneration") {
    if (!present(j, "text_config") || !j.at("text_config").is_object()) {
      return invalid_argument("Gemma3ForConditionalGeneration config without a text_config object");
    }
    json t = j.at("text_config");
    if (present(j, "tie_word_embeddings")) t["tie_word_embeddings"] = j.at("tie_word_embeddings");
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
      if (present(j, key) && !present(t, key)) t[key] = j.at(key);
    }
    if (!present(t, "model_type")) t["model_type"] = "gemma3_text";
    t.erase("architectures");
    auto c = parse_model_config(t);
    if (!c.is_ok()) return invalid_argument(str("text_config: ", c.status().message()));
    c->architecture = "Gemma3ForConditionalGeneration";
    c->raw["architectures"] = j.at("architectures");
    return c;
  }
  ModelConfig c;
  c.raw = j;
  if (present(j, "architectures")) {
    const json& a = j.at("architectures");
    if (!a.is_array() || (!a.empty() && !a[0].is_string()))
      return invalid_argument(str("field 'architectures' must be a list of strings, got ", a.dump()));
    if (!a.empty()) c.architecture = a[0].get<std::string>();
  }
  std::optional<std::string> model_type;
  RLM_RETURN_IF_ERROR(get_string(j, "model_type", &model_type));
  c.model_type = model_type.value_or("");
  const TypeDefaults d = defaults_for(c.model_type);

  RLM_RETURN_IF_ERROR(get_size(j, "vocab_size", &c.vocab_size));
  RLM_RETURN_IF_ERROR(get_size(j, "hidden_size", &c.hidden_size));
  RLM_RETURN_IF_ERROR(get_size(j, "intermediate_size", &c.intermediate_size));
  RLM_RETURN_IF_ERROR(get_size(j, "num_hidden_layers", &c.num_hidden_layers));
  RLM_RETURN_IF_ERROR(get_size(j, "num_attention_heads", &c.num_attention_heads));
  RLM_RETURN_IF_ERROR(get_optional_size(j, "num_key_value_heads",
                                        d.num_key_value_heads.value_or(c.num_attention_heads),
                                        &c.num_key_value_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return invalid_argument(str("num_attention_heads (", c.num_attention_heads,
                                ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")"));
  if (!present(j, "head_dim") && !d.head_dim && c.hidden_size % c.num_attention_heads != 0)
    return invalid_argument(str("hidden_size (", c.hidden_size, ") must be a multiple of num_attention_heads (",
                                c.num_attention_heads, ") when head_dim is not given"));
  RLM_RETURN_IF_ERROR(get_optional_size(j, "head_dim", d.head_dim.value_or(c.hidden_size / c.num_attention_heads),
                                        &c.head_dim));
  RLM_RETURN_IF_ERROR(get_optional_size(j, "max_position_embeddings", d.max_position_embeddings,
                                        &c.max_position_embeddings));

  std::optional<double> eps;
  RLM_RETURN_IF_ERROR(get_double(j, "rms_norm_eps", &eps));
  c.rms_norm_eps = eps.value_or(1e-6);
  if (!(c.rms_norm_eps > 0)) return invalid_argument(str("field 'rms_norm_eps' must be positive, got ", c.rms_norm_eps));

  RLM_RETURN_IF_ERROR(parse_rope_fields(j, c.max_position_embeddings, &c.rope));
  if (c.rotary_dim() <= 0)
    return invalid_argument(str("head_dim ", c.head_dim, " * partial_rotary_factor ", c.rope.partial_rotary_factor,
                                " leaves no rotary channels"));

  RLM_RETURN_IF_ERROR(get_bool(j, "tie_word_embeddings", d.tie_word_embeddings, &c.tie_word_embeddings));
  RLM_RETURN_IF_ERROR(get_bool(j, "attention_bias", false, &c.attention_bias));
  if (d.always_qkv_bias) c.attention_bias = true;
  RLM_RETURN_IF_ERROR(get_bool(j, "mlp_bias", false, &c.mlp_bias));

  std::optional<std::string> act;
  RLM_RETURN_IF_ERROR(get_string(j, d.act_key, &act));
  c.hidden_act = act.value_or(d.act);
  if (c.hidden_act != d.act)
    return unimplemented(str(d.act_key, " '", c.hidden_act, "' is not supported (only ", d.act, ")"));

  RLM_RETURN_IF_ERROR(parse_sliding_window(j, d, &c));
  RLM_RETURN_IF_ERROR(get_token_id(j, "bos_token_id", d.bos_token_id, &c.bos_token_id));
  RLM_RETURN_IF_ERROR(get_token_id(j, "pad_token_id", d.pad_token_id, &c.pad_token_id));
  RLM_RETURN_IF_ERROR(parse_eos(j, d, &c.eos_token_ids));
  RLM_RETURN_IF_ERROR(parse_dtype_field(j, &c.dtype));
  return c;
}

StatusOr<ModelConfig> load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "config.json";
  if (!fs::exists(file, ec)) return not_found(str("model config not found: ", file.string()));
  StatusOr<json> j = read_json_file(file.string());
  if (!j.is_ok()) {
    if (j.status().code() == StatusCode::kNotFound) return invalid_argument(str(file.string(), ": cannot open for reading"));
    return j.status();
  }
  StatusOr<ModelConfig> c = parse_model_config(*j);
  if (!c.is_ok()) return Status(c.status().code(), str(file.string(), ": ", c.status().message()));
  return c;
}

}  // namespace rlm
