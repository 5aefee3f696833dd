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
  Tensor weight;               // [out_features, in_features] (f32/bf16/f16 or block-quantized)
  std::optional<Tensor> bias;  // [out_features]
  // A fused projection whose parts are stored in different dtypes (GGUF files mix quantization
  // types, e.g. a Q6_K v_proj beside Q4_K q/k) keeps its row blocks here, each in its own dtype,
  // stacked in order; `weight` is then undefined.
  std::vector<Tensor> parts;   // [rows_i, in_features] each
  int64_t out_features() const;
};

// out = x @ l^T (+ bias): one ops::linear, or one per part writing its columns of out.
//   x: f32 [m, in_features]; out: f32 [m, out_features].
void apply_linear(const Linear& l, const Tensor& x, const Tensor& out);

// Stacks tensors with equal trailing dims along dim 0 into one new tensor of their dtype.
Tensor concat_rows(const std::vector<Tensor>& parts);

// Loads `prefix + ".weight"` of shape [out, in] (and `prefix + ".bias"` [out] when with_bias).
StatusOr<Linear> load_linear(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                             bool with_bias);
// Loads several projections sharing the input and stacks them: fused QKV or gate_up (adjacent
// parts of one dtype in one tensor; when the dtypes differ, Linear::parts).
StatusOr<Linear> load_fused_linear(WeightSource& ws, const std::vector<std::string>& prefixes,
                                   const std::vector<int64_t>& outs, int64_t in, bool with_bias);
StatusOr<Tensor> load_tensor(WeightSource& ws, const std::string& name, const Shape& shape);

}  // namespace rlm
