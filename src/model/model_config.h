// Model configuration parsed from a Hugging Face config.json (transformers 4.x and 5.x layouts)
// or synthesised from GGUF metadata.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace rlm {

// Rotary position embedding parameters. transformers 5.x keeps them in `rope_parameters`
// (rope_type, rope_theta, factor, ...); 4.x uses `rope_theta` + `rope_scaling`. Both parse here.
struct RopeParameters {
  std::string rope_type = "default";  // "default", "linear", "llama3"
  double rope_theta = 10000.0;
  double factor = 1.0;                  // linear, llama3
  double low_freq_factor = 1.0;         // llama3
  double high_freq_factor = 4.0;        // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3 (transformers: max_position_embeddings when absent)
  double partial_rotary_factor = 1.0;   // fraction of head_dim that is rotated
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;    // "llama", "qwen2", "qwen3", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeParameters rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (Qwen2 always has it)
  bool mlp_bias = false;
  std::string hidden_act = "silu";
  int64_t sliding_window = -1;  // -1: full attention; else the window of the "sliding_attention" layers
  // Per layer: "full_attention" or "sliding_attention", as transformers decides per model_type:
  // `layer_types` when given; Llama ignores `sliding_window`; Mistral slides every layer; Qwen2/Qwen3
  // slide only layers >= max_window_layers and Qwen3-MoE every layer, both only when
  // use_sliding_window is true; Gemma3 slides all but every sliding_window_pattern-th layer.
  std::vector<std::string> layer_types;  // [num_hidden_layers]
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  DType dtype = DType::kBF16;  // torch_dtype / dtype of the checkpoint
  nlohmann::json raw;          // the whole config, for architecture-specific fields

  // Number of leading head_dim channels that RoPE rotates: int(head_dim * partial_rotary_factor).
  int64_t rotary_dim() const { return static_cast<int64_t>(head_dim * rope.partial_rotary_factor); }
  // Whether layer `layer` attends within sliding_window (false for every layer when layer_types is
  // empty, as in a hand-built config).
  bool is_sliding_layer(int64_t layer) const;
};

// The rope fields of a config.json-like object `j` (`rope_scaling` over `rope_parameters`, then
// top-level rope_theta / partial_rotary_factor), as parse_model_config reads them; models with
// per-layer-type rope dicts (Gemma3) call it once per dict.
Status parse_rope_parameters(const nlohmann::json& j, int64_t max_position_embeddings, RopeParameters* rope);

// Parses and validates a config.json object (positive sizes, heads divide evenly, known
// hidden_act, ...). Errors name the offending field.
StatusOr<ModelConfig> parse_model_config(const nlohmann::json& j);
// Missing optional fields take the defaults transformers defines for the model_type (llama,
// mistral, qwen2, qwen3, qwen3_moe, gemma3_text; others use llama's); the sizes vocab/hidden/intermediate/layers/heads are required.
// `path` is a model directory (reads config.json inside) or a config.json file. Errors name the
// path: kNotFound when it does not exist, kInvalidArgument when it is not a JSON object.
StatusOr<ModelConfig> load_model_config(const std::string& path);

}  // namespace rlm
