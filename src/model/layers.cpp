#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fp8_linear.h"
#include "model/tensor_parallel.h"
#include "ops/ops.h"

namespace rlm {

namespace {

// The tensor `name` with one of the shapes in `shapes` (the first that matches), as f32.
StatusOr<Tensor> get_any_shape(WeightSource& ws, const std::string& name, const std::vector<Shape>& shapes) {
  std::string tried;
  for (const Shape& s : shapes) {
    StatusOr<Tensor> t = ws.get(name, s);
    if (t.is_ok()) {
      if (!is_floating(t->dtype())) return invalid_argument(str("tensor '", name, "' is ", t->describe(), ", not a float scale"));
      return t->to(DType::kF32).contiguous().view({t->numel()});
    }
    if (t.status().code() != StatusCode::kInvalidArgument) return t.status();
    tried += (tried.empty() ? "" : ", ") + shape_to_string(s);
  }
  return invalid_argument(str("tensor '", name, "' in ", ws.describe(), " has none of the shapes ", tried));
}

Status check_scales(const std::string& name, const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!(std::isfinite(p[i]) && p[i] > 0.0f)) {
      return invalid_argument(str("scale '", name, "'[", i, "] = ", p[i], " is not positive and finite"));
    }
  }
  return Status::ok();
}

// The scales of the f8e4m3 weight `prefix.weight` [n, k] (see load_linear).
StatusOr<ops::Fp8Scales> load_fp8_scales(WeightSource& ws, const std::string& prefix, int64_t n, int64_t k) {
  ops::Fp8Scales s;
  const WeightLoadOptions& o = ws.load_options;
  if (ws.has(prefix + ".weight_scale_inv")) {
    const int64_t bn = o.fp8_block_n, bk = o.fp8_block_k;
    const Shape shape{(n + bn - 1) / bn, (k + bk - 1) / bk};
    RLM_ASSIGN_OR_RETURN(Tensor t, ws.get(prefix + ".weight_scale_inv", shape));
    if (!is_floating(t.dtype())) return invalid_argument(str(prefix, ".weight_scale_inv is ", t.describe()));
    s.weight_scale = t.to(DType::kF32).contiguous();
    s.block_n = bn;
    s.block_k = bk;
    if (ws.has(prefix + ".input_scale")) {
      return unimplemented(str(prefix, ": block-scaled FP8 weights with a static input_scale are not supported "
                                       "(block scales take dynamic activation scales)"));
    }
  } else if (ws.has(prefix + ".weight_scale")) {
    RLM_ASSIGN_OR_RETURN(Tensor t, get_any_shape(ws, prefix + ".weight_scale", {{}, {1}, {n}, {n, 1}}));
    if (t.numel() == 1 && n != 1) {  // per tensor -> per channel (exact)
      Tensor full = Tensor::empty({n}, DType::kF32);
      full.fill_(t.data<float>()[0]);
      t = full;
    }
    s.weight_scale = t;
  } else {
    return not_found(str(prefix, ".weight is f8e4m3 but ", ws.describe(), " has neither ", prefix,
                         ".weight_scale_inv (block scales) nor ", prefix, ".weight_scale"));
  }
  RLM_RETURN_IF_ERROR(check_scales(prefix + ".weight_scale", s.weight_scale));
  if (ws.has(prefix + ".input_scale")) {
    RLM_ASSIGN_OR_RETURN(s.input_scale, get_any_shape(ws, prefix + ".input_scale", {{}, {1}}));
    RLM_RETURN_IF_ERROR(check_scales(prefix + ".input_scale", s.input_scale));
  }
  return s;
}

// Stacks the FP8 scales of parts whose weights are stacked in order.
StatusOr<ops::Fp8Scales> fuse_fp8_scales(const std::vector<std::string>& prefixes, const std::vector<Linear>& parts) {
  ops::Fp8Scales fused;
  const ops::Fp8Scales& first = parts[0].fp8;
  fused.block_n = first.block_n;
  fused.block_k = first.block_k;
  std::vector<Tensor> scales;
  float input_scale = 0.0f;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ops::Fp8Scales& s = parts[i].fp8;
    if (s.block_n != first.block_n || s.block_k != first.block_k || s.input_scale.defined() != first.input_scale.defined()) {
      return invalid_argument(str(prefixes[i], " and ", prefixes[0], " have different FP8 scale layouts; cannot fuse them"));
    }
    if (s.block_n > 0 && i + 1 < parts.size() && parts[i].weight.size(0) % s.block_n != 0) {
      return invalid_argument(str(prefixes[i], ": ", parts[i].weight.size(0), " rows are not a whole number of ",
                                  s.block_n, "-row scale blocks; cannot fuse it with ", prefixes[i + 1]));
    }
    scales.push_back(s.weight_scale);
    if (s.input_scale.defined()) input_scale = std::max(input_scale, s.input_scale.data<float>()[0]);
  }
  fused.weight_scale = concat_rows(scales);
  if (first.input_scale.defined()) fused.input_scale = Tensor::from_vector(std::vector<float>{input_scale});
  return fused;
}

}  // namespace

void apply_linear(const Linear& l, const Tensor& x, const Tensor& out) {
  if (l.fp8.defined()) return ops::linear(x, l.weight, l.bias, out, l.fp8);
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

void apply_norm_linear(const Tensor& x, const Tensor* residual, const Tensor& norm_weight, float eps,
                       const Linear& l, const Tensor& out) {
  if (l.fp8.defined())
    return ops::rms_norm_linear(x, residual, norm_weight, eps, l.weight, l.bias, out, l.fp8);
  if (residual != nullptr) {
    ops::fused_add_rms_norm(x, *residual, norm_weight, eps);
  } else {
    ops::rms_norm(x, norm_weight, eps, x);
  }
  apply_linear(l, x, out);
}

void apply_silu_and_mul_linear(const Linear& l, const Tensor& gate_up, const Tensor& act, const Tensor& out) {
  if (l.fp8.defined()) return ops::silu_and_mul_linear(gate_up, act, l.weight, l.bias, out, l.fp8);
  ops::silu_and_mul(gate_up, act);
  apply_linear(l, act, out);
}

bool try_fused_linear(const Linear& l, const Tensor& x, const Tensor& out, const ops::LinearFusion& f) {
  if (l.fp8.defined() || !l.parts.empty()) return false;
  return ops::fused_linear(x, l.weight, l.bias, out, f);
}

void apply_rms_norm_linear(const Tensor& input, const Tensor& norm_weight, float eps, const Tensor& scratch,
                           const Linear& l, const Tensor& out) {
  if (try_fused_linear(l, input, out, {&norm_weight, eps})) return;
  ops::rms_norm(input, norm_weight, eps, scratch);
  apply_linear(l, scratch, out);
}

void apply_rms_norm_linear_silu(const Tensor& input, const Tensor& norm_weight, float eps,
                                const Tensor& scratch, const Linear& l, const Tensor& gate_up,
                                const Tensor& act) {
  if (try_fused_linear(l, input, act, {&norm_weight, eps, /*silu_and_mul=*/true})) return;
  apply_rms_norm_linear(input, norm_weight, eps, scratch, l, gate_up);
  ops::silu_and_mul(gate_up, act);
}

void move_linear(Linear& l, Device device) {
  auto move = [&](Tensor& t) {
    if (t.defined()) t = t.contiguous().to(device);
  };
  move(l.weight);
  for (Tensor& p : l.parts) move(p);
  if (l.bias) move(*l.bias);
  move(l.fp8.weight_scale);
  move(l.fp8.input_scale);
}

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

Status quantize_linear_fp8(Linear& l, const std::string& name) {
  if (!is_floating(l.weight.dtype())) {
    return invalid_argument(
        str(name, " is ", l.weight.describe(), "; --quantization fp8 needs float weights"));
  }
  const Tensor w = l.weight.contiguous();
  const int64_t n = w.size(0), k = w.size(1);
  Tensor q = Tensor::empty({n, k}, DType::kF8E4M3);
  Tensor scale = Tensor::empty({n}, DType::kF32);
  cpu::quantize_fp8_weight_per_channel(w.data_ptr(), w.dtype(), n, k, k, static_cast<uint8_t*>(q.data_ptr()),
                                       scale.data<float>());
  l.weight = q;
  l.fp8 = ops::Fp8Scales{};
  l.fp8.weight_scale = scale;
  return Status::ok();
}

StatusOr<Linear> load_linear(WeightSource& ws, const std::string& prefix, int64_t out, int64_t in,
                             bool with_bias) {
  Linear l;
  RLM_ASSIGN_OR_RETURN(l.weight, ws.get(prefix + ".weight", {out, in}));
  if (l.weight.dtype() == DType::kF8E4M3) {
    RLM_ASSIGN_OR_RETURN(l.fp8, load_fp8_scales(ws, prefix, out, in));
  } else if (ws.load_options.quantize_fp8) {
    RLM_RETURN_IF_ERROR(quantize_linear_fp8(l, prefix + ".weight"));
  }
  if (with_bias) {
    RLM_ASSIGN_OR_RETURN(Tensor b, ws.get(prefix + ".bias", {out}));
    l.bias = b.to(DType::kF32);
  }
  return l;
}

StatusOr<Linear> load_fused_linear(WeightSource& ws, const std::vector<std::string>& prefixes,
                                   const std::vector<int64_t>& outs, int64_t in, bool with_bias) {
  RLM_CHECK_EQ(prefixes.size(), outs.size());
  std::vector<Linear> parts;
  std::vector<Tensor> weights, biases;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    RLM_ASSIGN_OR_RETURN(Linear l, load_linear(ws, prefixes[i], outs[i], in, with_bias));
    weights.push_back(l.weight);
    if (with_bias) biases.push_back(*l.bias);
    parts.push_back(std::move(l));
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
  const bool any_fp8 = std::any_of(parts.begin(), parts.end(), [](const Linear& p) { return p.fp8.defined(); });
  if (any_fp8) {
    if (!fused.parts.empty()) {
      return invalid_argument(str(prefixes[0], "...", prefixes.back(), " mix f8e4m3 and other weight dtypes; cannot fuse them"));
    }
    RLM_ASSIGN_OR_RETURN(fused.fp8, fuse_fp8_scales(prefixes, parts));
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

StatusOr<KvScales> load_kv_scales(WeightSource& ws, const std::string& attn_prefix) {
  KvScales s;
  if (!ws.load_options.read_kv_scales) return s;
  auto one = [&](const std::string& a, const std::string& b, float& dst) -> Status {
    for (const std::string& name : {a, b}) {
      if (!ws.has(name)) continue;
      RLM_ASSIGN_OR_RETURN(Tensor t, get_any_shape(ws, name, {{}, {1}}));
      RLM_RETURN_IF_ERROR(check_scales(name, t));
      dst = t.data<float>()[0];
      return Status::ok();
    }
    return Status::ok();
  };
  RLM_RETURN_IF_ERROR(one(attn_prefix + ".k_scale", attn_prefix + ".k_proj.k_scale", s.k));
  RLM_RETURN_IF_ERROR(one(attn_prefix + ".v_scale", attn_prefix + ".v_proj.v_scale", s.v));
  return s;
}

StatusOr<Tensor> load_zero_centred_norm(WeightSource& ws, const std::string& name, int64_t n) {
  RLM_ASSIGN_OR_RETURN(Tensor w, ws.get(name, {n}));
  Tensor f = w.to(DType::kF32).contiguous().clone();
  float* p = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] = 1.0f + p[i];
  return f;
}

Tensor make_rope_cache(const RopeParameters& r, int64_t head_dim, int64_t max_positions) {
  ops::RopeConfig rope;
  rope.rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * r.partial_rotary_factor);
  rope.theta = r.rope_theta;
  rope.is_neox = true;
  rope.scaling_type = r.rope_type;
  rope.factor = r.factor;
  rope.low_freq_factor = r.low_freq_factor;
  rope.high_freq_factor = r.high_freq_factor;
  rope.original_max_position = r.original_max_position_embeddings;
  return ops::make_rope_cos_sin_cache(rope, max_positions);
}

void move_tensor(Tensor& t, Device device) {
  if (t.defined()) t = t.contiguous().to(device);
}

void residual_input_norm(size_t layer, const Tensor& x, const Tensor& residual, const Tensor& weight, float eps) {
  if (layer == 0) {
    residual.copy_(x);
    ops::rms_norm(x, weight, eps, x);
  } else {
    ops::fused_add_rms_norm(x, residual, weight, eps);
  }
}

Tensor lm_head_logits(const Tensor& hidden_states, const Tensor& indices, const Tensor& lm_head, int64_t vocab_size) {
  const Device dev = hidden_states.device();
  const int64_t num_out = indices.numel();
  Tensor selected = Tensor::empty({num_out, hidden_states.size(1)}, DType::kF32, dev);  // [num_outputs, hidden]
  ops::embedding(indices, hidden_states, selected);
  Tensor logits = Tensor::empty({num_out, vocab_size}, DType::kF32, dev);  // [num_outputs, vocab_size]
  ops::linear(selected, lm_head, std::nullopt, logits);
  return logits;
}

StatusOr<Tensor> load_lm_head(WeightSource& ws, const ModelConfig& c, const Tensor& embed) {
  const bool stored = ws.has("lm_head.weight") && !(c.tie_word_embeddings && ws.synthesizes_any_name());
  // Under tensor parallelism this rank's vocabulary shard, laid out like the embedding's.
  if (stored) return load_vocab_parallel(ws, "lm_head.weight", c.vocab_size, c.hidden_size);
  if (c.tie_word_embeddings) return embed;
  return not_found(str("lm_head.weight is missing from ", ws.describe(), " and tie_word_embeddings is false"));
}

}  // namespace rlm
