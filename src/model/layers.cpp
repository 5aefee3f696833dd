#include "model/layers.h"

#include <cstring>

#include "ops/ops.h"

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
  Linear fused;
  // Runs of adjacent parts with one dtype are stacked; a fused weight of mixed dtypes keeps them apart.
  std::vector<Tensor> run;
  for (size_t i = 0; i < weights.size(); ++i) {
    run.push_back(weights[i]);
    if (i + 1 == weights.size() || weights[i + 1].dtype() != weights[i].dtype()) {
      fused.parts.push_back(run.size() == 1 ? run[0] : concat_rows(run));
      run.clear();
    }
  }
  if (fused.parts.size() == 1) {
    fused.weight = fused.parts[0];
    fused.parts.clear();
  }
  if (with_bias) {
    fused.bias = concat_rows(biases);
  }
  return fused;
}

int64_t Linear::out_features() const {
  if (parts.empty()) return weight.size(0);
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  return rows;
}

void apply_linear(const Linear& l, const Tensor& x, const Tensor& out) {
  if (l.parts.empty()) return ops::linear(x, l.weight, l.bias, out);
  int64_t row = 0;
  for (const Tensor& p : l.parts) {
    const int64_t rows = p.size(0);
    std::optional<Tensor> bias;
    if (l.bias) bias = l.bias->slice(0, row, row + rows);
    ops::linear(x, p, bias, out.slice(1, row, row + rows));
    row += rows;
  }
}

}  // namespace rlm
