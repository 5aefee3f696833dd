#include "engine/model_loader.h"

#include <cstdlib>
#include <filesystem>

#include "model/gguf_weights.h"

namespace rlm {

std::string default_model_path() {
  if (const char* env = std::getenv("RADIXLM_DEFAULT_MODEL"); env != nullptr && *env != '\0') return env;
  return std::string(RADIXLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) return not_found(str("model path '", path, "' does not exist"));
  LoadedModel out;
  std::unique_ptr<WeightSource> weights;
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".gguf") {
    RLM_ASSIGN_OR_RETURN(out.gguf, GgufFile::open(path));
    RLM_ASSIGN_OR_RETURN(out.config, gguf_model_config(*out.gguf));
    if (options.load_format == "dummy") {
      weights = make_dummy_weights(DType::kF32, options.dummy_seed, 0.02f, options.dummy_weight_type);
    } else if (options.load_format == "auto" || options.load_format == "gguf") {
      RLM_ASSIGN_OR_RETURN(weights, open_gguf_weights(out.gguf, DType::kF32,
                                                      options.gguf_keep_quantized ? GgufWeights::kQuantized
                                                                                  : GgufWeights::kDequantized));
    } else {
      return invalid_argument(str("load format '", options.load_format, "' does not apply to the GGUF file '", path,
                                  "' (use auto, gguf or dummy)"));
    }
    RLM_ASSIGN_OR_RETURN(out.model, create_model(out.config, *weights));
    return out;
  }
  RLM_ASSIGN_OR_RETURN(out.config, load_model_config(path));
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
  RLM_ASSIGN_OR_RETURN(out.model, create_model(out.config, *weights));
  return out;
}

}  // namespace rlm
