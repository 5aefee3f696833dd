#pragma once

#include "model/causal_lm.h"

namespace rlm {
StatusOr<std::unique_ptr<CausalLM>> create_qwen3_moe(const ModelConfig& config, WeightSource& weights);
}  // namespace rlm
