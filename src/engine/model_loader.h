// Opens a model from a path: a Hugging Face directory (config.json + safetensors), a *.gguf file
// (config from its metadata, matrices kept in their stored types, vectors in f32), or with
// load_format "dummy" a config.json / GGUF file alone with random weights of the right shapes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "model/causal_lm.h"
#include "formats/gguf.h"

namespace rlm {

struct LoadOptions {
  std::string load_format = "auto";  // "auto" | "safetensors" | "gguf" | "dummy"
  uint64_t dummy_seed = 0;
  // dummy: matrices as random blocks of this GGUF type (e.g. q4_k) instead of float values.
  std::optional<DType> dummy_weight_type;
  // GGUF: matrices stay in their stored types (F16/BF16/block-quantized, multiplied in place);
  // false dequantizes every tensor to f32 at load (the reference path).
  bool gguf_keep_quantized = true;
  // "" or "fp8": quantize float projections to FP8 at load (per output channel; Llama family;
  // GGUF projections are quantized from their dequantized f32 values, whatever gguf_keep_quantized says).
  // Checkpoints that declare an FP8 quantization_config load as they are either way.
  std::string quantization;
  // Tensor parallelism: load this rank's shard (model/tensor_parallel.h); Llama, Qwen2, Qwen3.
  TpShard tp;
};

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<CausalLM> model;
  std::shared_ptr<GgufFile> gguf;  // the open file when loaded from GGUF (its tokenizer, template)
};

StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& options = {});

// The embedded default model (SmolLM2-135M-Instruct, GGUF) that scripts/setup.sh installs:
// $RADIXLM_DEFAULT_MODEL when set, else <source dir>/models/SmolLM2-135M-Instruct.Q4_1.gguf.
std::string default_model_path();

}  // namespace rlm
