#include "engine/model_loader.h"

#include <filesystem>

namespace rlm {

StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) return not_found(str("model path '", path, "' does not exist"));
  LoadedModel out;
  RLM_ASSIGN_OR_RETURN(out.config, load_model_config(path));
  std::unique_ptr<WeightSource> weights;
  if (options.load_format == "dummy") {
    weights = make_dummy_weights(out.config.dtype == DType::kF32 ? DType::kF32 : DType::kBF16, options.dummy_seed);
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
