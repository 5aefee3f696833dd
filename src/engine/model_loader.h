// Opens a model from a path: a Hugging Face directory (config.json + safetensors), or with
// load_format "dummy" a config.json alone with random weights of the right shapes.
#pragma once

#include <memory>
#include <string>

#include "model/causal_lm.h"

namespace rlm {

struct LoadOptions {
  std::string load_format = "auto";  // "auto" | "safetensors" | "dummy"
  uint64_t dummy_seed = 0;
};

struct LoadedModel {
  ModelConfig config;
  std::unique_ptr<CausalLM> model;
};

StatusOr<LoadedModel> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace rlm
