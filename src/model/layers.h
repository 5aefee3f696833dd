// Weight-loading helpers shared by the model files: fetch checked tensors by HF name, and fuse
// QKV / gate_up projections at load time by stacking rows.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/weight_source.h"

namespace rlm {

struct Linear {
  Tensor weight;               // [out_features, in_features] (f32/bf16/f16)
  std::optional<Tensor> bias;  // [out_features]
  int64_t out_features() const { return weight.size(0); }
};

// Stacks tensors with equal trailing dims along dim 0 into one new tensor of their dtype.
Tensor concat_rows(const std::vector<Tensor>& parts);

// Loads `prefix + ".weight"` of shape [out, in] (and `prefix + ".bias"` [out] when with_bias).
StatusOr<Linear> load_linear(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                             bool with_bias);
// Loads several projections sharing the input and stacks them: fused QKV or gate_up.
StatusOr<Linear> load_fused_linear(WeightSource& ws, const std::vector<std::string>& prefixes,
                                   const std::vector<int64_t>& outs, int64_t in, bool with_bias);
StatusOr<Tensor> load_tensor(WeightSource& ws, const std::string& name, const Shape& shape);

}  // namespace rlm
