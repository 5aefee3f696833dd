// The quantization a checkpoint declares: config.json's `quantization_config` (Hugging Face
// "fp8", compressed-tensors, ModelOpt) or ModelOpt's hf_quant_config.json. Only FP8 (E4M3)
// layouts are supported; anything else is an error naming its quant_method.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/model_config.h"

namespace rlm {

struct QuantizationSpec {
  std::string method;        // "" (none) | "fp8" | "compressed-tensors" | "modelopt"
  int64_t block_n = 0;       // "fp8" with weight_block_size: the block of `weight_scale_inv`
  int64_t block_k = 0;
  bool fp8() const { return !method.empty(); }
};

// Reads the quantization of the checkpoint in `model_dir` (config already parsed from it).
// Errors name the field and the quant_method.
StatusOr<QuantizationSpec> parse_quantization_spec(const ModelConfig& config, const std::string& model_dir);

}  // namespace rlm
