#include "engine/model_loader.h"

#include <cstdlib>
#include <filesystem>

#include "model/gguf_weights.h"
#include "model/quantization_config.h"

namespace rlm {

std::string default_model_path() {
  if (const char* env = std::getenv("RADIXLM_DEFAULT_MODEL"); env != nullptr && *env != '\0') return env;
  return std::string(RADIXLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

namespace {

// FP8 projections run in the Llama-family decoder (Llama, Mistral, Qwen2, Qwen3), Qwen3-MoE (its
// attention projections and experts; the router stays float) and Gemma 3; not in Qwen3-Next.
Status check_fp8_architecture(const ModelConfig& config, const std::string& what) {
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           "Qwen3MoeForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}) {
    if (config.architecture == arch) return Status::ok();
  }
  return unimplemented(str(what,
                           " is supported for LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                           "Qwen3ForCausalLM, Qwen3MoeForCausalLM, Gemma3ForCausalLM and "
                           "Gemma3ForConditionalGeneration, not ",
                           config.architecture));
}

// Tensor-parallel shards: the Llama-family decoder and Qwen3-Next, float or GGUF weights (not FP8 yet).
Status check_tp(const ModelConfig& config, const LoadOptions& options) {
  if (!options.tp.active()) return Status::ok();
  if (!options.quantization.empty()) {
    return unimplemented(str("--tp ", options.tp.size, " with --quantization ", options.quantization,
                             " is not supported yet"));
  }
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           "Qwen3NextForCausalLM"}) {
    if (config.architecture == arch) return Status::ok();
  }
  return unimplemented(str("--tp ", options.tp.size, " is supported for LlamaForCausalLM, MistralForCausalLM, "
                           "Qwen2ForCausalLM, Qwen3ForCausalLM and Qwen3NextForCausalLM, not yet for ", config.architecture,
                           " (run with --tp 1)"));
}

}  // namespace

StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) return not_found(str("model path '", path, "' does not exist"));
  if (!options.quantization.empty() && options.quantization != "fp8") {
    return invalid_argument(str("unknown quantization '", options.quantization, "' (fp8)"));
  }
  LoadedModel out;
  std::unique_ptr<WeightSource> weights;
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".gguf") {
    RLM_ASSIGN_OR_RETURN(out.gguf, GgufFile::open(path));
    RLM_ASSIGN_OR_RETURN(out.config, gguf_model_config(*out.gguf));
    RLM_RETURN_IF_ERROR(check_tp(out.config, options));
    if (options.load_format == "dummy") {
      weights = make_dummy_weights(DType::kF32, options.dummy_seed, 0.02f, options.dummy_weight_type);
    } else if (options.load_format == "auto" || options.load_format == "gguf") {
      // --quantization fp8 starts from the dequantized (f32) weights.
      const bool keep = options.gguf_keep_quantized && options.quantization.empty();
      RLM_ASSIGN_OR_RETURN(weights, open_gguf_weights(out.gguf, DType::kF32,
                                                      keep ? GgufWeights::kQuantized : GgufWeights::kDequantized));
    } else {
      return invalid_argument(str("load format '", options.load_format, "' does not apply to the GGUF file '", path,
                                  "' (use auto, gguf or dummy)"));
    }
    // --quantization fp8 quantizes the dequantized (f32) GGUF projections like any float weights.
    if (options.quantization == "fp8") {
      RLM_RETURN_IF_ERROR(check_fp8_architecture(out.config, "--quantization fp8"));
      weights->load_options.quantize_fp8 = true;
    }
    weights->load_options.tp = options.tp;
    RLM_ASSIGN_OR_RETURN(out.model, create_model(out.config, *weights));
    return out;
  }
  RLM_ASSIGN_OR_RETURN(out.config, load_model_config(path));
  RLM_RETURN_IF_ERROR(check_tp(out.config, options));
  if (options.load_format == "dummy") {
    weights = make_dummy_weights(out.config.dtype == DType::kF32 ? DType::kF32 : DType::kBF16, options.dummy_seed,
                                 0.02f, options.dummy_weight_type);
  } else if (options.load_format == "auto" || options.load_format == "safetensors") {
    if (!fs::is_directory(path)) {
      return invalid_argument(str("'", path, "' is not a model directory (expected config.json + *.safetensors)"));
    }
    RLM_ASSIGN_OR_RETURN(weights, open_safetensors(path));
  } else {
    return invalid_argument(str("unknown load format '", options.load_format, "' (use auto, safetensors or dummy)"));
  }
  QuantizationSpec quant;
  if (options.load_format != "dummy") {
    RLM_ASSIGN_OR_RETURN(quant, parse_quantization_spec(out.config, fs::is_directory(path) ? path : fs::path(path).parent_path().string()));
    weights->load_options.read_kv_scales = true;
  }
  if (quant.fp8()) {
    RLM_RETURN_IF_ERROR(check_fp8_architecture(out.config, str("the FP8 checkpoint (quant_method '", quant.method, "')")));
    if (quant.block_n > 0) {
      weights->load_options.fp8_block_n = quant.block_n;
      weights->load_options.fp8_block_k = quant.block_k;
    }
  } else if (options.quantization == "fp8") {
    RLM_RETURN_IF_ERROR(check_fp8_architecture(out.config, "--quantization fp8"));
    weights->load_options.quantize_fp8 = true;
  }
  weights->load_options.tp = options.tp;
  RLM_ASSIGN_OR_RETURN(out.model, create_model(out.config, *weights));
  return out;
}

}  // namespace rlm
