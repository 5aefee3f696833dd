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
  int64_t original_max_position_embeddings = 8192;  // llama3
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
  int64_t sliding_window = -1;  // -1: full attention
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
  DType dtype = DType::kBF16;  // torch_dtype / dtype of the checkpoint
  nlohmann::json raw;          // the whole config, for architecture-specific fields
};

// Parses and validates a config.json object (positive sizes, heads divide evenly, known
// hidden_act, ...). Errors name the offending field.
StatusOr<ModelConfig> parse_model_config(const nlohmann::json& j);
// `path` is a model directory (reads config.json inside) or a config.json file.
StatusOr<ModelConfig> load_model_config(const std::string& path);

}  // namespace rlm
