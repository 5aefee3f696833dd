#include "model/layers.h"

#include <cstring>

namespace rlm {

Tensor concat_rows(const std::vector<Tensor>& parts) {
  RLM_CHECK(!parts.empty()) << "concat_rows of nothing";
  Shape shape = parts[0].shape();
  int64_t rows = 0;
  for (const Tensor& p : parts) {
    RLM_CHECK(p.dtype() == parts[0].dtype() && p.dim() == parts[0].dim())
        << "concat_rows: " << p.describe() << " vs " << parts[0].describe();
    for (int64_t d = 1; d < p.dim(); ++d) RLM_CHECK_EQ(p.size(d), shape[d]) << " concat_rows: " << p.describe();
    rows += p.size(0);
  }
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, parts[0].dtype(), parts[0].device());
  int64_t row = 0;
  for (const Tensor& p : parts) {
    out.slice(0, row, row + p.size(0)).copy_(p);
    row += p.size(0);
  }
  return out;
}

StatusOr<Tensor> load_tensor(WeightSource& ws, const std::string& name, const Shape& shape) {
  return ws.get(name, shape);
}

StatusOr<Linear> load_linear(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                             bool with_bias) {
  Linear l;
  RLM_ASSIGN_OR_RETURN(l.weight, ws.get(prefix + ".weight", {out, in}));
  if (with_bias) {
    RLM_ASSIGN_OR_RETURN(Tensor b, ws.get(prefix + ".bias", {out}));
    l.bias = b.to(DType::kF32);
  }
  return l;
}

StatusOr<Linear> load_fused_linear(WeightSource& ws, const std::vector<std::string>& prefixes,
                                   const std::vector<int64_t>& outs, int64_t in, bool with_bias) {
  RLM_CHECK_EQ(prefixes.size(), outs.size());
  std::vector<Tensor> weights, biases;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    RLM_ASSIGN_OR_RETURN(Linear l, load_linear(ws, prefixes[i], outs[i], in, with_bias));
    weights.push_back(l.weight);
    if (with_bias) biases.push_back(*l.bias);
  }
  for (size_t i = 1; i < weights.size(); ++i) {
    if (weights[i].dtype() != weights[0].dtype()) {
      return invalid_argument(str(prefixes[i], ".weight is ", dtype_name(weights[i].dtype()), " but ", prefixes[0],
                                  ".weight is ", dtype_name(weights[0].dtype()), "; cannot fuse them"));
    }
  }
  Linear fused;
  fused.weight = concat_rows(weights);
  if (with_bias) {
    fused.bias = concat_rows(biases);
  }
  return fused;
}

}  // namespace rlm
