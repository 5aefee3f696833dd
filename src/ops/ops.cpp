// ops:: — boundary checks (shapes, dtypes, devices; messages name the tensors) and dispatch to the
// kernels of the tensors' device: kernels/cpu/ always, kernels/cuda/ when built with CUDA (RADIXLM_WITH_CUDA).
#include "ops/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "ops/fp8_cuda_weight.h"
#include "ops/op_check.h"

#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/activation.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/kv_store.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rotary.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/softmax.h"
#endif
#include "kernels/cpu/activation.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cpu/kv_store.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rotary.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/softmax.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/quant_matmul.h"
#endif
#include "core/env.h"
#include "formats/gguf_dequant.h"

namespace rlm::ops {
namespace {

// CUDA branches: `RLM_IF_CUDA(c, device, call;)` runs `call` when built with CUDA, else fails with
// "not built for cuda:N".
#ifdef RADIXLM_WITH_CUDA
#define RLM_IF_CUDA(c, device, ...) __VA_ARGS__
#else
#define RLM_IF_CUDA(c, device, ...) (c).not_built(device)
#endif

// Every message starts with "ops::<op>: <name> <tensor>" (ops/op_check.h).
using OpCheck = detail::OpChecker;

// Values of a 1-D i32/i64 CPU tensor of any stride, as int64.
std::vector<int64_t> index_values(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.size(0)));
  for (int64_t i = 0; i < t.size(0); ++i) {
    v[i] = t.dtype() == DType::kI32 ? t.at<int32_t>({i}) : t.at<int64_t>({i});
  }
  return v;
}

// Row stride of a 2-D tensor that tolerates size-1 rows (any stride is fine then).
int64_t row_stride(const Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); }

// A 2-D [n, d] or 3-D [n, heads, d] f32 tensor as rows for the norm kernels.
cpu::RowSet row_set(const Tensor& t) {
  cpu::RowSet r;
  r.data = t.data<float>();
  r.n0 = t.size(0);
  r.stride0 = t.stride(0);
  if (t.dim() == 3) {
    r.n1 = t.size(1);
    r.stride1 = t.stride(1);
  }
  return r;
}

#ifdef RADIXLM_WITH_CUDA
cuda::Rows cuda_rows(const Tensor& t) {
  const cpu::RowSet r = row_set(t);
  return {r.data, r.n0, r.n1, r.stride0, r.stride1};
}
#endif

void check_rows(const OpCheck& c, const char* name, const Tensor& t) {
  c.dtype(name, t, {DType::kF32});
  if (t.dim() != 2 && t.dim() != 3) {
    c.fail_with(str(name, " ", t.describe(), " must be 2-D [n, d] or 3-D [n, heads, d]"));
  }
  c.unit_last_stride(name, t);
}

// name: how messages call it (the fused ops also take a linear's weight).
void check_norm_weight(const OpCheck& c, const Tensor& weight, int64_t d, const char* name = "weight") {
  c.dtype(name, weight, {DType::kF32, DType::kBF16, DType::kF16});
  c.dims(name, weight, 1, "[d]");
  c.size(name, weight, 0, d, "the row length d");
  c.unit_last_stride(name, weight);
}

// Block-quantized embedding rows: dequantized one by one (checked ids, nothing written on error).
void quantized_embedding(const OpCheck& c, const Tensor& ids, const Tensor& weight, const Tensor& out) {
  const std::vector<int64_t> rows = index_values(ids);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= weight.size(0)) {
      c.fail_with(str("ids[", i, "] = ", rows[i], " is outside [0, ", weight.size(0), ")"));
    }
  }
  const auto* w = static_cast<const uint8_t*>(weight.data_ptr());
  const size_t row_bytes = dtype_nbytes(weight.dtype(), row_stride(weight));
  for (size_t i = 0; i < rows.size(); ++i) {
    dequantize_row(weight.dtype(), w + static_cast<size_t>(rows[i]) * row_bytes,
                   out.data<float>() + static_cast<int64_t>(i) * row_stride(out), weight.size(1));
  }
}

}  // namespace

void embedding(const Tensor& ids, const Tensor& weight, const Tensor& out) {
  OpCheck c("embedding");
  c.dtype("ids", ids, {DType::kI32});
  c.dims("ids", ids, 1, "[num_tokens]");
  const bool quantized = is_quantized(weight.dtype());
  if (!quantized) c.dtype("weight", weight, {DType::kF32, DType::kBF16, DType::kF16});
  c.dims("weight", weight, 2, "[vocab_size, hidden]");
  c.unit_last_stride("weight", weight);
  if (quantized) {
    c.dtype("out", out, {DType::kF32});  // block-quantized rows are dequantized to f32
  } else {
    c.dtype("out", out, {DType::kF32, DType::kBF16, DType::kF16});
  }
  c.dims("out", out, 2, "[num_tokens, hidden]");
  c.size("out", out, 0, ids.size(0), "num_tokens (ids.size(0))");
  c.size("out", out, 1, weight.size(1), "hidden (weight.size(1))");
  c.unit_last_stride("out", out);
  c.same_device(ids, "weight", weight);
  c.same_device(ids, "out", out);
  if (quantized) {
    if (ids.device().is_cpu()) return quantized_embedding(c, ids, weight, out);
    RLM_IF_CUDA(c, ids.device(),
                cuda::dequantize_rows(ids.device().index, weight.data_ptr(), weight.dtype(),
                                      dtype_nbytes(weight.dtype(), row_stride(weight)), weight.size(0),
                                      ids.data<int32_t>(), ids.stride(0), ids.size(0), weight.size(1), out.data_ptr(),
                                      out.dtype(), row_stride(out)));
    return;
  }
  if (ids.device().is_cpu()) {
    const Tensor ids_c = ids.contiguous();
    cpu::embedding(ids_c.data<int32_t>(), ids.size(0), weight.data_ptr(), weight.dtype(), row_stride(weight),
                   weight.size(0), weight.size(1), out.data_ptr(), out.dtype(), row_stride(out));
  } else if (ids.device().is_cuda()) {
    RLM_IF_CUDA(c, ids.device(),
                cuda::embedding(ids.device().index, ids.data<int32_t>(), ids.size(0), ids.stride(0), weight.data_ptr(),
                                weight.dtype(), row_stride(weight), weight.size(0), weight.size(1), out.data_ptr(),
                                out.dtype(), row_stride(out)));
  } else {
    c.not_built(ids.device());
  }
}

void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
  OpCheck c("rms_norm");
  check_rows(c, "x", x);
  check_rows(c, "out", out);
  if (out.shape() != x.shape()) c.fail_with(str("out ", out.describe(), " must have the shape of x ", x.describe()));
  check_norm_weight(c, weight, x.size(-1));
  c.same_device(x, "weight", weight);
  c.same_device(x, "out", out);
  if (x.device().is_cpu()) {
    cpu::rms_norm(row_set(x), row_set(out), x.size(-1), weight.data_ptr(), weight.dtype(), eps);
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                cuda::rms_norm(x.device().index, cuda_rows(x), cuda_rows(out), x.size(-1), weight.data_ptr(),
                               weight.dtype(), eps));
  } else {
    c.not_built(x.device());
  }
}

void fused_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps) {
  OpCheck c("fused_add_rms_norm");
  check_rows(c, "x", x);
  check_rows(c, "residual", residual);
  if (residual.shape() != x.shape()) {
    c.fail_with(str("residual ", residual.describe(), " must have the shape of x ", x.describe()));
  }
  check_norm_weight(c, weight, x.size(-1));
  c.same_device(x, "residual", residual);
  c.same_device(x, "weight", weight);
  if (x.device().is_cpu()) {
    cpu::fused_add_rms_norm(row_set(x), row_set(residual), x.size(-1), weight.data_ptr(), weight.dtype(), eps);
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                cuda::fused_add_rms_norm(x.device().index, cuda_rows(x), cuda_rows(residual), x.size(-1),
                                         weight.data_ptr(), weight.dtype(), eps));
  } else {
    c.not_built(x.device());
  }
}

Tensor make_rope_cos_sin_cache(const RopeConfig& cfg, int64_t max_positions) {
  OpCheck c("make_rope_cos_sin_cache");
  if (cfg.rotary_dim <= 0 || cfg.rotary_dim % 2 != 0) {
    c.fail_with(str("rotary_dim must be positive and even, got ", cfg.rotary_dim));
  }
  if (!(cfg.theta > 0)) c.fail_with(str("theta must be positive, got ", cfg.theta));
  if (max_positions <= 0) c.fail_with(str("max_positions must be positive, got ", max_positions));
  const std::vector<float> inv_freq =
      cpu::rope_inv_freq(cfg.rotary_dim, cfg.theta, cfg.scaling_type, cfg.factor, cfg.low_freq_factor,
                         cfg.high_freq_factor, cfg.original_max_position);
  Tensor cache = Tensor::empty({max_positions, cfg.rotary_dim}, DType::kF32);
  cpu::rope_cos_sin(inv_freq, max_positions, cache.data<float>());
  return cache;
}

namespace {

// rotary_embedding's checks; returns rotary_dim.
int64_t check_rotary(const OpCheck& c, const Tensor& q, const Tensor& k, const Tensor& positions,
                     const Tensor& cos_sin) {
  c.dtype("q", q, {DType::kF32});
  c.dims("q", q, 3, "[num_tokens, num_qo_heads, head_dim]");
  c.unit_last_stride("q", q);
  c.dtype("k", k, {DType::kF32});
  c.dims("k", k, 3, "[num_tokens, num_kv_heads, head_dim]");
  c.unit_last_stride("k", k);
  c.size("k", k, 0, q.size(0), "num_tokens (q.size(0))");
  c.size("k", k, 2, q.size(2), "head_dim (q.size(2))");
  c.dtype("positions", positions, {DType::kI32, DType::kI64});
  c.dims("positions", positions, 1, "[num_tokens]");
  c.size("positions", positions, 0, q.size(0), "num_tokens (q.size(0))");
  c.dtype("cos_sin", cos_sin, {DType::kF32});
  c.dims("cos_sin", cos_sin, 2, "[max_positions, rotary_dim]");
  if (!cos_sin.is_contiguous()) c.fail_with(str("cos_sin ", cos_sin.describe(), " must be contiguous"));
  const int64_t rotary_dim = cos_sin.size(1);
  if (rotary_dim % 2 != 0 || rotary_dim == 0 || rotary_dim > q.size(2)) {
    c.fail_with(str("cos_sin ", cos_sin.describe(), ": rotary_dim must be even, positive and <= head_dim ",
                    q.size(2)));
  }
  c.same_device(q, "k", k);
  c.same_device(q, "positions", positions);
  c.same_device(q, "cos_sin", cos_sin);
  return rotary_dim;
}

}  // namespace

void rotary_embedding(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos_sin,
                      bool is_neox) {
  OpCheck c("rotary_embedding");
  const int64_t rotary_dim = check_rotary(c, q, k, positions, cos_sin);
  if (q.device().is_cpu()) {
    const std::vector<int64_t> pos = index_values(positions);
    const cpu::HeadSet qs{q.data<float>(), q.size(1), q.stride(0), q.stride(1)};
    const cpu::HeadSet ks{k.data<float>(), k.size(1), k.stride(0), k.stride(1)};
    cpu::rotary_embedding(qs, ks, q.size(0), pos.data(), cos_sin.data<float>(), cos_sin.size(0), rotary_dim,
                          is_neox);
  } else if (q.device().is_cuda()) {
    RLM_IF_CUDA(c, q.device(),
                cuda::rotary_embedding(q.device().index, {q.data<float>(), q.size(1), q.stride(0), q.stride(1)},
                                       {k.data<float>(), k.size(1), k.stride(0), k.stride(1)}, q.size(0),
                                       positions.data_ptr(), positions.dtype(), positions.stride(0),
                                       cos_sin.data<float>(), cos_sin.size(0), rotary_dim, is_neox));
  } else {
    c.not_built(q.device());
  }
}

namespace {

std::atomic<QuantizedActivations>& quantized_activations_mode() {
  static std::atomic<QuantizedActivations> mode([] {
    const char* e = std::getenv("RADIXLM_QUANT_ACTIVATIONS");
    return e != nullptr && std::string(e) == "f32" ? QuantizedActivations::kF32 : QuantizedActivations::kInt8;
  }());
  return mode;
}

// The f32-activation reference: blocks of weight rows dequantized, then the f32 linear (sgemm).
void linear_dequantized_rows(const Tensor& x, const Tensor& weight, const Tensor* bias, const Tensor& out) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const int64_t rows = cpu::kLinearBlockRows;
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(std::min(rows, n) * k));
  const auto* w = static_cast<const uint8_t*>(weight.data_ptr());
  const size_t row_bytes = dtype_nbytes(weight.dtype(), row_stride(weight));
  for (int64_t j0 = 0; j0 < n; j0 += rows) {
    const int64_t nb = std::min(rows, n - j0);
    for (int64_t j = 0; j < nb; ++j) {
      dequantize_row(weight.dtype(), w + static_cast<size_t>(j0 + j) * row_bytes, scratch.data() + j * k, k);
    }
    cpu::linear(x.data<float>(), x.size(0), k, row_stride(x), scratch.data(), DType::kF32, nb, k, nullptr,
                DType::kF32, out.data<float>() + j0, row_stride(out));
  }
  if (bias != nullptr) {
    cpu::add_bias_rows(bias->data_ptr(), bias->dtype(), x.size(0), n, out.data<float>(), row_stride(out));
  }
}

// The checks linear() makes of everything but the weight's dtype; returns the bias or null.
// out_cols: out's columns when they are not weight's rows (fused_linear's SiLU-and-mul: n / 2).
const Tensor* check_linear(const OpCheck& c, const Tensor& x, const Tensor& weight,
                           const std::optional<Tensor>& bias, const Tensor& out, int64_t out_cols = -1) {
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[m, k]");
  c.unit_last_stride("x", x);
  c.dims("weight", weight, 2, "[n, k]");
  c.unit_last_stride("weight", weight);
  c.size("weight", weight, 1, x.size(1), "k (x.size(1))");
  c.dtype("out", out, {DType::kF32});
  c.dims("out", out, 2, "[m, n]");
  c.unit_last_stride("out", out);
  c.size("out", out, 0, x.size(0), "m (x.size(0))");
  if (out_cols < 0) {
    c.size("out", out, 1, weight.size(0), "n (weight.size(0))");
  } else {
    c.size("out", out, 1, out_cols, "n / 2 (weight.size(0) / 2)");
  }
  c.same_device(x, "weight", weight);
  c.same_device(x, "out", out);
  const Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  if (b != nullptr) {
    c.dtype("bias", *b, {DType::kF32, DType::kBF16, DType::kF16});
    c.dims("bias", *b, 1, "[n]");
    c.size("bias", *b, 0, weight.size(0), "n (weight.size(0))");
    c.unit_last_stride("bias", *b);
    c.same_device(x, "bias", *b);
  }
  return b;
}

std::atomic<Fp8Activations>& fp8_activations_mode() {
  static std::atomic<Fp8Activations> mode([] {
    const char* e = std::getenv("RADIXLM_FP8_ACTIVATIONS");
    return e != nullptr && std::string(e) == "f32" ? Fp8Activations::kF32 : Fp8Activations::kFp8;
  }());
  return mode;
}

}  // namespace

void set_quantized_linear_activations(QuantizedActivations mode) { quantized_activations_mode() = mode; }

QuantizedActivations quantized_linear_activations() { return quantized_activations_mode(); }

void set_fp8_linear_activations(Fp8Activations mode) { fp8_activations_mode() = mode; }

Fp8Activations fp8_linear_activations() { return fp8_activations_mode(); }

namespace {

// linear()'s checks with an f8e4m3 weight (every message names `c`'s op); returns the bias or null.
const Tensor* check_fp8_linear(const OpCheck& c, const Tensor& x, const Tensor& weight,
                               const std::optional<Tensor>& bias, const Tensor& out,
                               const Fp8Scales& scales) {
  c.dtype("weight", weight, {DType::kF8E4M3});
  const Tensor* b = check_linear(c, x, weight, bias, out);
  const int64_t n = weight.size(0), k = weight.size(1);
  const Tensor& ws = scales.weight_scale;
  c.dtype("weight_scale", ws, {DType::kF32});
  c.contiguous("weight_scale", ws);
  c.same_device(x, "weight_scale", ws);
  if (scales.block_n < 0 || scales.block_k < 0 || (scales.block_n == 0) != (scales.block_k == 0)) {
    c.fail_with(str("block size ", scales.block_n, " x ", scales.block_k, " must be two positive sizes or 0 x 0"));
  }
  const bool blocks = scales.block_n > 0;
  const Shape want = blocks ? Shape{(n + scales.block_n - 1) / scales.block_n, (k + scales.block_k - 1) / scales.block_k}
                            : Shape{n};
  if (ws.shape() != want) {
    c.fail_with(str("weight_scale ", ws.describe(), " must have shape ", shape_to_string(want),
                    blocks ? str(" (", scales.block_n, " x ", scales.block_k, " blocks)") : " (one scale per output channel)"));
  }
  const Tensor& is = scales.input_scale;
  if (is.defined()) {
    if (blocks) c.fail_with("a static input_scale applies to per-channel weights only (block scales are dynamic)");
    c.dtype("input_scale", is, {DType::kF32});
    if (is.numel() != 1) c.fail_with(str("input_scale ", is.describe(), " must hold one value"));
    c.same_device(x, "input_scale", is);
  }
  return b;
}

}  // namespace

#ifdef RADIXLM_WITH_CUDA
cuda::Fp8Weight cuda_fp8_weight(const Tensor& weight, const Fp8Scales& scales) {
  cuda::Fp8Weight w;
  w.data = weight.data_ptr();
  w.n = weight.size(0);
  w.k = weight.size(1);
  w.ldw = row_stride(weight);
  w.scale = scales.weight_scale.data<float>();
  w.block_n = scales.block_n;
  w.block_k = scales.block_k;
  w.input_scale = scales.input_scale.defined() ? scales.input_scale.data<float>() : nullptr;
  return w;
}
#endif

void linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out,
            const Fp8Scales& scales) {
  OpCheck c("linear");
  const Tensor* b = check_fp8_linear(c, x, weight, bias, out, scales);
  const int64_t n = weight.size(0), k = weight.size(1);
  const Tensor& ws = scales.weight_scale;
  const Tensor& is = scales.input_scale;
  const bool quantize_x = fp8_linear_activations() == Fp8Activations::kFp8;
  if (x.device().is_cpu()) {
    cpu::Fp8WeightView w;
    w.data = static_cast<const uint8_t*>(weight.data_ptr());
    w.n = n;
    w.k = k;
    w.ldw = row_stride(weight);
    w.scale = ws.data<float>();
    w.block_n = scales.block_n;
    w.block_k = scales.block_k;
    w.input_scale = is.defined() ? is.data<float>() : nullptr;
    cpu::fp8_linear(x.data<float>(), x.size(0), row_stride(x), w, b ? b->data_ptr() : nullptr,
                    b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out), quantize_x);
  } else if (x.device().is_cuda()) {
    if (!quantize_x) c.fail_with("the f32-activation reference mode (RADIXLM_FP8_ACTIVATIONS=f32) is CPU-only");
    RLM_IF_CUDA(c, x.device(),
                cuda::fp8_linear(x.device().index, x.data<float>(), x.size(0), row_stride(x),
                                 cuda_fp8_weight(weight, scales), b ? b->data_ptr() : nullptr,
                                 b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out)));
  } else {
    c.not_built(x.device());
  }
}

void silu_and_mul_linear(const Tensor& gate_up, const Tensor& act, const Tensor& weight,
                         const std::optional<Tensor>& bias, const Tensor& out, const Fp8Scales& scales) {
#ifdef RADIXLM_WITH_CUDA
  if (gate_up.device().is_cuda() && fp8_linear_activations() == Fp8Activations::kFp8) {
    OpCheck c("silu_and_mul_linear");
    c.dtype("gate_up", gate_up, {DType::kF32});
    c.dims("gate_up", gate_up, 2, "[n, 2 * k]");
    c.unit_last_stride("gate_up", gate_up);
    c.same_device(gate_up, "act", act);
    const Tensor* b = check_fp8_linear(c, act, weight, bias, out, scales);
    if (gate_up.size(0) != act.size(0) || gate_up.size(1) != 2 * act.size(1)) {
      c.fail_with(str("gate_up ", gate_up.describe(), " must be [n, 2 * k] for act ", act.describe()));
    }
    const cuda::Fp8Weight w = cuda_fp8_weight(weight, scales);
    if (cuda::fp8_linear_silu_and_mul(gate_up.device().index, gate_up.data<float>(), gate_up.size(0),
                                      row_stride(gate_up), w, b ? b->data_ptr() : nullptr,
                                      b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out))) {
      return;
    }
  }
#endif
  silu_and_mul(gate_up, act);
  linear(act, weight, bias, out, scales);
}

void rms_norm_linear(const Tensor& x, const Tensor* residual, const Tensor& norm_weight, float eps,
                     const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out,
                     const Fp8Scales& scales) {
#ifdef RADIXLM_WITH_CUDA
  if (x.device().is_cuda() && fp8_linear_activations() == Fp8Activations::kFp8) {
    OpCheck c("rms_norm_linear");
    check_rows(c, "x", x);
    c.dims("x", x, 2, "[n, k]");
    if (residual != nullptr) {
      check_rows(c, "residual", *residual);
      if (residual->shape() != x.shape()) {
        c.fail_with(str("residual ", residual->describe(), " must have the shape of x ", x.describe()));
      }
      c.same_device(x, "residual", *residual);
    }
    check_norm_weight(c, norm_weight, x.size(-1), "norm_weight");
    c.same_device(x, "norm_weight", norm_weight);
    const Tensor* b = check_fp8_linear(c, x, weight, bias, out, scales);
    const cuda::Rows xr = cuda_rows(x);
    if (cuda::fp8_linear_rms_norm(
            x.device().index, residual != nullptr, xr, residual ? cuda_rows(*residual) : xr, x.size(1),
            norm_weight.data_ptr(), norm_weight.dtype(), eps, cuda_fp8_weight(weight, scales),
            b ? b->data_ptr() : nullptr, b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out))) {
      return;
    }
  }
#endif
  if (residual != nullptr) {
    fused_add_rms_norm(x, *residual, norm_weight, eps);
  } else {
    rms_norm(x, norm_weight, eps, x);
  }
  linear(x, weight, bias, out, scales);
}

namespace {

std::atomic<bool>& fused_linear_flag() {
  static std::atomic<bool> flag{env_switch_on("RADIXLM_FUSED_GEMV")};
  return flag;
}

std::atomic<bool>& fused_linear_quantized_flag() {
  static std::atomic<bool> flag{env_switch_set("RADIXLM_FUSED_GEMV_QUANT")};
  return flag;
}

}  // namespace

void set_fused_linear_enabled(bool enabled) { fused_linear_flag().store(enabled, std::memory_order_relaxed); }

bool fused_linear_enabled() { return fused_linear_flag().load(std::memory_order_relaxed); }

void set_fused_linear_quantized_enabled(bool enabled) {
  fused_linear_quantized_flag().store(enabled, std::memory_order_relaxed);
}

bool fused_linear_quantized_enabled() {
  return fused_linear_quantized_flag().load(std::memory_order_relaxed);
}

bool fused_linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out,
                  const LinearFusion& f) {
  OpCheck c("fused_linear");
  const bool quantized = weight.defined() && is_quantized(weight.dtype());
  if (!quantized) c.dtype("weight", weight, {DType::kF32, DType::kBF16, DType::kF16});
  const int64_t n = weight.size(0);
  if (f.silu_and_mul && n % 2 != 0) {
    c.fail_with(str("weight ", weight.describe(), ": SiLU-and-mul needs an even number of rows [gate | up]"));
  }
  const Tensor* b = check_linear(c, x, weight, bias, out, f.silu_and_mul ? n / 2 : -1);
  if (f.norm_weight != nullptr) {
    check_norm_weight(c, *f.norm_weight, x.size(1), "norm_weight");
    c.same_device(x, "norm_weight", *f.norm_weight);
  }
  if (!fused_linear_enabled() || (quantized && !fused_linear_quantized_enabled()) || !x.device().is_cuda() ||
      x.size(0) == 0) {
    return false;
  }
#ifdef RADIXLM_WITH_CUDA
  cuda::GemvFusion g;
  if (f.norm_weight != nullptr) {
    g.norm_weight = f.norm_weight->data_ptr();
    g.norm_dtype = f.norm_weight->dtype();
    g.eps = f.eps;
  }
  g.silu_and_mul = f.silu_and_mul;
  g.accumulate = f.accumulate;
  const int dev = x.device().index;
  if (quantized) {
    return cuda::quant_linear_fused(
        dev, x.data<float>(), x.size(0), x.size(1), row_stride(x), weight.data_ptr(), weight.dtype(), n,
        dtype_nbytes(weight.dtype(), row_stride(weight)), b ? b->data_ptr() : nullptr,
        b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out), g);
  }
  return cuda::linear_fused(dev, x.data<float>(), x.size(0), x.size(1), row_stride(x), weight.data_ptr(),
                            weight.dtype(), n, row_stride(weight), b ? b->data_ptr() : nullptr,
                            b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out), g);
#else
  return false;
#endif
}

void linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias, const Tensor& out) {
  OpCheck c("linear");
  if (weight.defined() && weight.dtype() == DType::kF8E4M3) {
    c.fail_with(str("weight ", weight.describe(), " is f8e4m3: pass its scales (ops::Fp8Scales)"));
  }
  const bool quantized = weight.defined() && is_quantized(weight.dtype());
  if (!quantized) c.dtype("weight", weight, {DType::kF32, DType::kBF16, DType::kF16});
  const Tensor* b = check_linear(c, x, weight, bias, out);
  if (quantized && x.device().is_cpu()) {
    if (quantized_linear_activations() == QuantizedActivations::kF32) return linear_dequantized_rows(x, weight, b, out);
    cpu::quant_linear(x.data<float>(), x.size(0), x.size(1), row_stride(x), weight.data_ptr(), weight.dtype(),
                      weight.size(0), dtype_nbytes(weight.dtype(), row_stride(weight)), b ? b->data_ptr() : nullptr,
                      b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out));
  } else if (quantized && x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                cuda::quant_linear(x.device().index, x.data<float>(), x.size(0), x.size(1), row_stride(x),
                                   weight.data_ptr(), weight.dtype(), weight.size(0),
                                   dtype_nbytes(weight.dtype(), row_stride(weight)), b ? b->data_ptr() : nullptr,
                                   b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out)));
  } else if (x.device().is_cpu()) {
    cpu::linear(x.data<float>(), x.size(0), x.size(1), row_stride(x), weight.data_ptr(), weight.dtype(),
                weight.size(0), row_stride(weight), b ? b->data_ptr() : nullptr, b ? b->dtype() : DType::kF32,
                out.data<float>(), row_stride(out));
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                cuda::linear(x.device().index, x.data<float>(), x.size(0), x.size(1), row_stride(x), weight.data_ptr(),
                             weight.dtype(), weight.size(0), row_stride(weight), b ? b->data_ptr() : nullptr,
                             b ? b->dtype() : DType::kF32, out.data<float>(), row_stride(out)));
  } else {
    c.not_built(x.device());
  }
}

namespace {

enum class GatedAct { kSilu, kGeluTanh };

void act_and_mul(const char* op, GatedAct act, const Tensor& x, const Tensor& out) {
  OpCheck c(op);
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[n, 2 * inter]");
  c.unit_last_stride("x", x);
  if (x.size(1) % 2 != 0) c.fail_with(str("x ", x.describe(), ": the last dimension must be even"));
  c.dtype("out", out, {DType::kF32});
  c.dims("out", out, 2, "[n, inter]");
  c.unit_last_stride("out", out);
  c.size("out", out, 0, x.size(0), "n (x.size(0))");
  c.size("out", out, 1, x.size(1) / 2, "inter (x.size(1) / 2)");
  c.same_device(x, "out", out);
  const bool silu = act == GatedAct::kSilu;
  if (x.device().is_cpu()) {
    (silu ? cpu::silu_and_mul : cpu::gelu_tanh_and_mul)(x.data<float>(), x.size(0), out.size(1), row_stride(x),
                                                        out.data<float>(), row_stride(out));
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                (silu ? cuda::silu_and_mul : cuda::gelu_tanh_and_mul)(x.device().index, x.data<float>(), x.size(0),
                                                                      out.size(1), row_stride(x), out.data<float>(),
                                                                      row_stride(out)));
  } else {
    c.not_built(x.device());
  }
}

enum class RowMap { kScale, kSoftCap };

void map_rows(const char* op, RowMap map, const Tensor& x, float value) {
  OpCheck c(op);
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[n, d]");
  c.unit_last_stride("x", x);
  if (!std::isfinite(value) || (map == RowMap::kSoftCap && !(value > 0))) {
    c.fail_with(str(map == RowMap::kSoftCap ? "cap" : "s", " must be ",
                    map == RowMap::kSoftCap ? "positive and finite" : "finite", ", got ", value));
  }
  const bool scale = map == RowMap::kScale;
  if (x.device().is_cpu()) {
    (scale ? cpu::scale_rows : cpu::soft_cap_rows)(x.data<float>(), x.size(0), x.size(1), row_stride(x), value);
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                (scale ? cuda::scale_rows : cuda::soft_cap_rows)(x.device().index, x.data<float>(), x.size(0),
                                                                x.size(1), row_stride(x), value));
  } else {
    c.not_built(x.device());
  }
}

}  // namespace

void silu_and_mul(const Tensor& x, const Tensor& out) { act_and_mul("silu_and_mul", GatedAct::kSilu, x, out); }

void gelu_tanh_and_mul(const Tensor& x, const Tensor& out) {
  act_and_mul("gelu_tanh_and_mul", GatedAct::kGeluTanh, x, out);
}

void scale(const Tensor& x, float s) { map_rows("scale", RowMap::kScale, x, s); }

void soft_cap(const Tensor& x, float cap) { map_rows("soft_cap", RowMap::kSoftCap, x, cap); }

namespace {

void check_heads(const OpCheck& c, const char* name, const Tensor& t, std::initializer_list<DType> dtypes,
                 const char* layout) {
  c.dtype(name, t, dtypes);
  c.dims(name, t, 3, layout);
  c.unit_last_stride(name, t);
}

cpu::KvRows kv_rows(const Tensor& t) { return {t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; }
cpu::AttnRows attn_rows(const Tensor& t) { return {t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; }

void check_index(const OpCheck& c, const char* name, const Tensor& t, int64_t expected, const char* what) {
  c.dtype(name, t, {DType::kI32});
  c.dims(name, t, 1, what);
  if (expected >= 0) c.size(name, t, 0, expected, what);
}

// KV scales: positive and finite; anything but 1 only for an f8e4m3 cache.
void check_kv_scales(const OpCheck& c, const Tensor& k_cache, float k_scale, float v_scale) {
  for (float s : {k_scale, v_scale}) {
    if (!(std::isfinite(s) && s > 0.0f)) c.fail_with(str("KV scale ", s, " must be positive and finite"));
  }
  if (k_cache.dtype() != DType::kF8E4M3 && (k_scale != 1.0f || v_scale != 1.0f)) {
    c.fail_with(str("KV scales ", k_scale, ", ", v_scale, " apply to f8e4m3 caches only; k_cache is ", k_cache.describe()));
  }
}

// store_kv_cache's checks.
void check_store(const OpCheck& c, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                 const Tensor& v_cache, const Tensor& out_cache_loc, float k_scale, float v_scale) {
  const std::initializer_list<DType> floats = {DType::kF32, DType::kBF16, DType::kF16};
  const std::initializer_list<DType> caches = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3};
  check_heads(c, "k", k, floats, "[num_tokens, num_kv_heads, head_dim]");
  check_heads(c, "v", v, floats, "[num_tokens, num_kv_heads, v_head_dim]");
  check_heads(c, "k_cache", k_cache, caches, "[num_slots, num_kv_heads, head_dim]");
  check_heads(c, "v_cache", v_cache, caches, "[num_slots, num_kv_heads, v_head_dim]");
  if (v_cache.dtype() != k_cache.dtype()) c.fail_with(str("v_cache ", v_cache.describe(), " must match k_cache ", k_cache.describe()));
  if (v.dtype() != k.dtype())
    c.fail_with(str("v ", v.describe(), " must have the dtype of k ", k.describe()));
  check_kv_scales(c, k_cache, k_scale, v_scale);
  // v may have its own head size (v_head_dim = v.size(2)); everything else matches k.
  if (v.size(0) != k.size(0) || v.size(1) != k.size(1)) {
    c.fail_with(str("v ", v.describe(), " must have the tokens and heads of k ", k.describe()));
  }
  if (v_cache.size(0) != k_cache.size(0) || v_cache.size(1) != k_cache.size(1)) {
    c.fail_with(str("v_cache ", v_cache.describe(), " must have the slots and heads of k_cache ", k_cache.describe()));
  }
  c.size("k_cache", k_cache, 1, k.size(1), "num_kv_heads (k.size(1))");
  c.size("k_cache", k_cache, 2, k.size(2), "head_dim (k.size(2))");
  c.size("v_cache", v_cache, 2, v.size(2), "v_head_dim (v.size(2))");
  c.dtype("out_cache_loc", out_cache_loc, {DType::kI32, DType::kI64});
  c.dims("out_cache_loc", out_cache_loc, 1, "[num_tokens]");
  c.size("out_cache_loc", out_cache_loc, 0, k.size(0), "num_tokens (k.size(0))");
  for (auto [name, t] : {std::pair{"v", &v}, {"k_cache", &k_cache}, {"v_cache", &v_cache},
                         {"out_cache_loc", &out_cache_loc}}) {
    c.same_device(k, name, *t);
  }
}

}  // namespace

void store_kv_cache(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& out_cache_loc, float k_scale, float v_scale) {
  OpCheck c("store_kv_cache");
  check_store(c, k, v, k_cache, v_cache, out_cache_loc, k_scale, v_scale);
  if (k.device().is_cpu()) {
    const std::vector<int64_t> loc = index_values(out_cache_loc);
    cpu::store_kv_cache(kv_rows(k), kv_rows(v), kv_rows(k_cache), kv_rows(v_cache), loc.data(), k.size(0),
                        k.size(1), k.size(2), k_cache.size(0), k_scale, v_scale, v.size(2));
  } else if (k.device().is_cuda()) {
#ifdef RADIXLM_WITH_CUDA
    auto rows = [](const Tensor& t) { return cuda::KvRows{t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; };
    cuda::store_kv_cache(k.device().index, rows(k), rows(v), rows(k_cache), rows(v_cache), out_cache_loc.data_ptr(),
                         out_cache_loc.dtype(), out_cache_loc.stride(0), k.size(0), k.size(1), k.size(2),
                         k_cache.size(0), k_scale, v_scale, v.size(2));
#else
    c.not_built(k.device());
#endif
  } else {
    c.not_built(k.device());
  }
}

void rotary_store_kv_cache(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                           const Tensor& cos_sin, bool is_neox, const Tensor& k_cache, const Tensor& v_cache,
                           const Tensor& out_cache_loc, float k_scale, float v_scale, const Tensor* q_norm,
                           const Tensor* k_norm, float norm_eps) {
  OpCheck c("rotary_store_kv_cache");
  const int64_t rotary_dim = check_rotary(c, q, k, positions, cos_sin);
  check_store(c, k, v, k_cache, v_cache, out_cache_loc, k_scale, v_scale);
  if ((q_norm == nullptr) != (k_norm == nullptr)) c.fail_with("q_norm and k_norm come together");
  if (q_norm != nullptr) {
    for (auto [name, w] : {std::pair{"q_norm", q_norm}, {"k_norm", k_norm}}) {
      c.dtype(name, *w, {DType::kF32, DType::kBF16, DType::kF16});
      c.dims(name, *w, 1, "[head_dim]");
      c.size(name, *w, 0, q.size(2), "head_dim (q.size(2))");
      c.same_device(q, name, *w);
      if (!w->is_contiguous()) c.fail_with(str(name, " ", w->describe(), " must be contiguous"));
    }
    if (q_norm->dtype() != k_norm->dtype()) c.fail_with("q_norm and k_norm of different dtypes");
  }
  bool fused = false;
#ifdef RADIXLM_WITH_CUDA
  fused = q.device().is_cuda() && cuda::rotary_store_kv_fits(q.size(2), rotary_dim, v.size(2));
#endif
  if (!fused) {                 // the ops in turn
    if (q.device().is_cpu()) {  // every position and slot checked before anything is written
      const std::vector<int64_t> pos = index_values(positions), loc = index_values(out_cache_loc);
      for (size_t t = 0; t < pos.size(); ++t) {
        if (pos[t] < 0 || pos[t] >= cos_sin.size(0)) {
          c.fail_with(str("position ", pos[t], " of token ", t, " is outside the cos/sin cache [0, ",
                          cos_sin.size(0), ")"));
        }
        if (loc[t] < 0 || loc[t] >= k_cache.size(0)) {
          c.fail_with(
              str("out_cache_loc[", t, "] = ", loc[t], " is outside the pool [0, ", k_cache.size(0), ")"));
        }
      }
    }
    if (q_norm != nullptr) {
      rms_norm(q, *q_norm, norm_eps, q);
      rms_norm(k, *k_norm, norm_eps, k);
    }
    rotary_embedding(q, k, positions, cos_sin, is_neox);
    store_kv_cache(k, v, k_cache, v_cache, out_cache_loc, k_scale, v_scale);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  auto heads = [](const Tensor& t) {
    return cuda::Heads{t.data<float>(), t.size(1), t.stride(0), t.stride(1)};
  };
  auto rows = [](const Tensor& t) { return cuda::KvRows{t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; };
  cuda::HeadNorms norms;
  if (q_norm != nullptr) {
    norms = {q_norm->data_ptr(), k_norm->data_ptr(), q_norm->dtype(), norm_eps};
  }
  cuda::rotary_store_kv_cache(q.device().index, heads(q), heads(k), rows(v), rows(k_cache), rows(v_cache),
                              q.size(0), positions.data_ptr(), positions.dtype(), positions.stride(0),
                              cos_sin.data<float>(), cos_sin.size(0), rotary_dim, is_neox,
                              out_cache_loc.data_ptr(), out_cache_loc.dtype(), out_cache_loc.stride(0),
                              k.size(2), v.size(2), k_cache.size(0), k_scale, v_scale, norms);
#endif
}

namespace {

void paged_attention_impl(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                          const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                          int64_t page_size, const AttentionParams& params, const Tensor& out,
                          const PagedAttentionPlan* host_plan, const Tensor* kv_begin = nullptr,
                          const Tensor* kv_end = nullptr, const Tensor* lse = nullptr) {
  OpCheck c(lse != nullptr ? "paged_attention_partial" : "paged_attention");
  check_heads(c, "q", q, {DType::kF32}, "[num_tokens, num_qo_heads, head_dim]");
  check_heads(c, "out", out, {DType::kF32}, "[num_tokens, num_qo_heads, v_head_dim]");
  const std::initializer_list<DType> caches = {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3};
  check_heads(c, "k_cache", k_cache, caches, "[num_slots, num_kv_heads, head_dim]");
  check_heads(c, "v_cache", v_cache, caches, "[num_slots, num_kv_heads, v_head_dim]");
  // The value head size (v_cache.size(2), the output's) may differ from q/k's (split sizes).
  if (v_cache.size(0) != k_cache.size(0) || v_cache.size(1) != k_cache.size(1) ||
      v_cache.dtype() != k_cache.dtype()) {
    c.fail_with(str("v_cache ", v_cache.describe(), " must match k_cache ", k_cache.describe(),
                    " (its head size may differ)"));
  }
  if (out.shape() != Shape{q.size(0), q.size(1), v_cache.size(2)}) {
    c.fail_with(str("out ", out.describe(), " must have q's tokens and heads (q ", q.describe(),
                    ") and v_cache's head size (v_cache ", v_cache.describe(), ")"));
  }
  check_kv_scales(c, k_cache, params.k_scale, params.v_scale);
  c.size("k_cache", k_cache, 2, q.size(2), "head_dim (q.size(2))");
  const int64_t num_qo_heads = q.size(1), num_kv_heads = k_cache.size(1);
  if (num_kv_heads == 0 || num_qo_heads % num_kv_heads != 0) {
    c.fail_with(str("num_qo_heads ", num_qo_heads, " (q ", q.describe(), ") is not a multiple of num_kv_heads ",
                    num_kv_heads, " (k_cache ", k_cache.describe(), ")"));
  }
  check_index(c, "seq_lens", seq_lens, -1, "[bs]");
  const int64_t bs = seq_lens.size(0);
  check_index(c, "qo_indptr", qo_indptr, bs + 1, "[bs + 1]");
  check_index(c, "kv_indptr", kv_indptr, bs + 1, "[bs + 1]");
  check_index(c, "kv_indices", kv_indices, -1, "[nnz_pages]");
  if (page_size <= 0) c.fail_with(str("page_size must be positive, got ", page_size));
  if (params.logit_soft_cap < 0.0f || !std::isfinite(params.logit_soft_cap)) {
    c.fail_with(str("logit_soft_cap must be >= 0 and finite, got ", params.logit_soft_cap));
  }
  if (!std::isfinite(params.scale)) c.fail_with(str("scale must be finite, got ", params.scale));
  if (params.sliding_window == 0 || params.sliding_window < -1) {
    c.fail_with(str("sliding_window must be -1 (off) or positive, got ", params.sliding_window));
  }
  for (auto [name, t] : {std::pair{"k_cache", &k_cache}, {"v_cache", &v_cache}, {"qo_indptr", &qo_indptr},
                         {"kv_indptr", &kv_indptr}, {"kv_indices", &kv_indices}, {"seq_lens", &seq_lens},
                         {"out", &out}}) {
    c.same_device(q, name, *t);
  }
  if (lse != nullptr) {
    check_index(c, "kv_begin", *kv_begin, bs, "[bs]");
    check_index(c, "kv_end", *kv_end, bs, "[bs]");
    c.dtype("lse", *lse, {DType::kF32});
    c.dims("lse", *lse, 2, "[num_tokens, num_qo_heads]");
    if (lse->size(0) != q.size(0) || lse->size(1) != num_qo_heads || !lse->is_contiguous()) {
      c.fail_with(str("lse ", lse->describe(), " must be contiguous [", q.size(0), ", ", num_qo_heads, "]"));
    }
    for (auto [name, t] : {std::pair{"kv_begin", kv_begin}, {"kv_end", kv_end}, {"lse", lse}}) {
      c.same_device(q, name, *t);
    }
  }
  float* lse_ptr = lse != nullptr ? lse->data<float>() : nullptr;
  const int64_t lse_ts = lse != nullptr ? lse->stride(0) : 0;
  // Host copies of the key ranges, for the CPU kernels and host validation (not made when the CUDA
  // path runs on the caller's plan, which must not synchronise).
  Tensor kb_host, ke_host;
  if (kv_begin != nullptr && (q.device().is_cpu() || host_plan == nullptr)) {
    kb_host = kv_begin->to(Device::cpu()).contiguous();
    ke_host = kv_end->to(Device::cpu()).contiguous();
  }
  // The index arrays (on the host, or host copies of device tensors) and the per-layer config.
  auto make_batch = [&](const Tensor& qo, const Tensor& kv, const Tensor& idx, const Tensor& sl, const Tensor* kb,
                        const Tensor* ke) {
    cpu::PagedBatch batch;
    batch.batch_size = bs;
    batch.qo_indptr = qo.data<int32_t>();
    batch.kv_indptr = kv.data<int32_t>();
    batch.kv_indices = idx.data<int32_t>();
    batch.seq_lens = sl.data<int32_t>();
    batch.num_pages_indexed = kv_indices.size(0);
    batch.page_size = page_size;
    batch.num_slots = k_cache.size(0);
    batch.num_tokens = q.size(0);
    if (kb != nullptr) {
      batch.kv_begin = kb->data<int32_t>();
      batch.kv_end = ke->data<int32_t>();
    }
    return batch;
  };
  cpu::AttnConfig cfg;
  cfg.num_qo_heads = num_qo_heads;
  cfg.num_kv_heads = num_kv_heads;
  cfg.head_dim = q.size(2);
  cfg.v_head_dim = v_cache.size(2);
  cfg.scale = params.scale;
  cfg.sliding_window = params.sliding_window;
  cfg.logit_soft_cap = params.logit_soft_cap;
  cfg.k_scale = params.k_scale;
  cfg.v_scale = params.v_scale;
#ifdef RADIXLM_WITH_CUDA
  // Runs the CUDA kernels: the prefill kernel (with lse) for partial attention, else the dispatcher.
  auto run_cuda = [&](const cpu::PagedBatch& batch, const cuda::AttentionPlan& plan) {
    if (lse_ptr != nullptr) {
      cuda::paged_attention_prefill(attn_rows(q), attn_rows(k_cache), attn_rows(v_cache), batch, cfg, plan,
                                    out.data<float>(), out.stride(0), out.stride(1), lse_ptr, lse_ts);
    } else {
      cuda::paged_attention(attn_rows(q), attn_rows(k_cache), attn_rows(v_cache), batch, cfg, plan, out.data<float>(),
                            out.stride(0), out.stride(1));
    }
  };
#endif
  if (q.device().is_cpu()) {
    const Tensor qo_c = qo_indptr.contiguous(), kv_c = kv_indptr.contiguous();  // named: the batch points into them
    const Tensor idx_c = kv_indices.contiguous(), sl_c = seq_lens.contiguous();
    const cpu::PagedBatch batch = make_batch(qo_c, kv_c, idx_c, sl_c, kv_begin != nullptr ? &kb_host : nullptr,
                                                  kv_end != nullptr ? &ke_host : nullptr);
    cpu::paged_attention(attn_rows(q), attn_rows(k_cache), attn_rows(v_cache), batch, cfg, out.data<float>(),
                         out.stride(0), out.stride(1), lse_ptr, lse_ts);
  } else if (q.device().is_cuda()) {
#ifdef RADIXLM_WITH_CUDA
    // Index tensors live on the device. With the caller's plan (host_plan, the backends' path) they
    // are used as they are; without one, a host copy (a synchronising transfer) is validated with
    // the CPU rules and gives the plan (decode or prefill; the kernel picks the split count).
    for (auto [name, t] : {std::pair{"qo_indptr", &qo_indptr}, {"kv_indptr", &kv_indptr},
                           {"kv_indices", &kv_indices}, {"seq_lens", &seq_lens}}) {
      if (!t->is_contiguous()) c.fail_with(str(name, " ", t->describe(), " must be contiguous on CUDA"));
    }
    if (kv_begin != nullptr && (!kv_begin->is_contiguous() || !kv_end->is_contiguous())) {
      c.fail_with(str("kv_begin ", kv_begin->describe(), " and kv_end ", kv_end->describe(),
                      " must be contiguous on CUDA"));
    }
    if (host_plan != nullptr) {
      // The caller's plan: no host copies, no synchronisation (CUDA-graph-capturable).
      if (host_plan->max_qo_len < 0 || host_plan->max_seq_len < host_plan->max_qo_len ||
          (host_plan->all_decode && host_plan->max_qo_len != 1 && bs > 0) || host_plan->num_kv_splits < 0) {
        c.fail_with(str("inconsistent plan: max_qo_len ", host_plan->max_qo_len, ", max_seq_len ",
                        host_plan->max_seq_len, ", all_decode ", host_plan->all_decode, ", num_kv_splits ",
                        host_plan->num_kv_splits));
      }
      if (host_plan->all_decode && q.size(0) != bs) {
        c.fail_with(str("a decode plan needs one query row per request: q ", q.describe(), ", ", bs, " requests"));
      }
      cuda::AttentionPlan plan;
      plan.max_qo_len = host_plan->max_qo_len;
      plan.max_seq_len = host_plan->max_seq_len;
      plan.all_decode = host_plan->all_decode;
      plan.num_kv_splits = host_plan->num_kv_splits;
      cpu::PagedBatch batch = make_batch(qo_indptr, kv_indptr, kv_indices, seq_lens, kv_begin, kv_end);
      run_cuda(batch, plan);
      return;
    }
    const Tensor qo_h = qo_indptr.to(Device::cpu()), kv_h = kv_indptr.to(Device::cpu());
    const Tensor idx_h = kv_indices.to(Device::cpu()), sl_h = seq_lens.to(Device::cpu());
    cpu::PagedBatch batch = make_batch(qo_h, kv_h, idx_h, sl_h, kv_begin != nullptr ? &kb_host : nullptr,
                                       kv_end != nullptr ? &ke_host : nullptr);
    cpu::validate_paged_batch(batch);
    const cuda::AttentionPlan plan = cuda::make_attention_plan(batch);
    batch.qo_indptr = qo_indptr.data<int32_t>();
    batch.kv_indptr = kv_indptr.data<int32_t>();
    batch.kv_indices = kv_indices.data<int32_t>();
    batch.seq_lens = seq_lens.data<int32_t>();
    if (kv_begin != nullptr) {
      batch.kv_begin = kv_begin->data<int32_t>();
      batch.kv_end = kv_end->data<int32_t>();
    }
    run_cuda(batch, plan);
#else
    c.not_built(q.device());
#endif
  } else {
    c.not_built(q.device());
  }
}

}  // namespace

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                     const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                     int64_t page_size, const AttentionParams& params, const Tensor& out) {
  paged_attention_impl(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, seq_lens, page_size, params, out,
                       nullptr);
}

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                     const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                     int64_t page_size, const AttentionParams& params, const Tensor& out,
                     const PagedAttentionPlan& plan) {
  paged_attention_impl(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, seq_lens, page_size, params, out,
                       &plan);
}

void paged_attention_partial(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qo_indptr,
                             const Tensor& kv_indptr, const Tensor& kv_indices, const Tensor& seq_lens,
                             const Tensor& kv_begin, const Tensor& kv_end, int64_t page_size,
                             const AttentionParams& params, const Tensor& out, const Tensor& lse,
                             const PagedAttentionPlan* plan) {
  paged_attention_impl(q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, seq_lens, page_size, params, out, plan,
                       &kv_begin, &kv_end, &lse);
}

void merge_attention_states(const Tensor& parts, const Tensor& lse, const Tensor& out, const Tensor& lse_out) {
  OpCheck c("merge_attention_states");
  c.dtype("parts", parts, {DType::kF32});
  c.dims("parts", parts, 4, "[K, n, heads, head_dim]");
  const int64_t k = parts.size(0), n = parts.size(1), heads = parts.size(2), d = parts.size(3);
  if (k < 1) c.fail_with(str("parts ", parts.describe(), " must hold at least one part"));
  auto contiguous_shape = [&](const char* name, const Tensor& t, Shape want) {
    c.dtype(name, t, {DType::kF32});
    if (!t.is_contiguous() || t.shape() != want) {
      c.fail_with(str(name, " ", t.describe(), " must be contiguous with shape ", shape_to_string(want)));
    }
    c.same_device(parts, name, t);
  };
  contiguous_shape("parts", parts, {k, n, heads, d});
  contiguous_shape("lse", lse, {k, n, heads});
  contiguous_shape("out", out, {n, heads, d});
  const bool with_lse_out = lse_out.defined();
  if (with_lse_out) contiguous_shape("lse_out", lse_out, {n, heads});
  float* lse_out_ptr = with_lse_out ? lse_out.data<float>() : nullptr;
  if (parts.device().is_cpu()) {
    cpu::merge_attention_states(parts.data<float>(), lse.data<float>(), k, n, heads, d, out.data<float>(),
                                lse_out_ptr);
  } else if (parts.device().is_cuda()) {
    RLM_IF_CUDA(c, parts.device(),
                cuda::merge_attention_states(parts.data<float>(), lse.data<float>(), k, n, heads, d, out.data<float>(),
                                             lse_out_ptr));
  } else {
    c.not_built(parts.device());
  }
}

namespace {

void check_logits(const OpCheck& c, const char* name, const Tensor& x) {
  c.dtype(name, x, {DType::kF32});
  c.dims(name, x, 2, "[n, v]");
  c.unit_last_stride(name, x);
}

}  // namespace

void softmax(const Tensor& x) {
  OpCheck c("softmax");
  check_logits(c, "x", x);
  if (x.device().is_cpu()) {
    cpu::softmax(x.data<float>(), x.size(0), x.size(1), row_stride(x));
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(), cuda::softmax(x.device().index, x.data<float>(), x.size(0), x.size(1), row_stride(x)));
  } else {
    c.not_built(x.device());
  }
}

void log_softmax(const Tensor& x) {
  OpCheck c("log_softmax");
  check_logits(c, "x", x);
  if (x.device().is_cpu()) {
    cpu::log_softmax(x.data<float>(), x.size(0), x.size(1), row_stride(x));
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                cuda::log_softmax(x.device().index, x.data<float>(), x.size(0), x.size(1), row_stride(x)));
  } else {
    c.not_built(x.device());
  }
}

void argmax(const Tensor& x, const Tensor& out) {
  OpCheck c("argmax");
  check_logits(c, "x", x);
  if (x.size(1) == 0) c.fail_with(str("x ", x.describe(), " has empty rows"));
  c.dtype("out", out, {DType::kI32});
  c.dims("out", out, 1, "[n]");
  c.size("out", out, 0, x.size(0), "n (x.size(0))");
  c.same_device(x, "out", out);
  if (x.device().is_cpu()) {
    for (int64_t i = 0; i < x.size(0); ++i) {
      out.at<int32_t>({i}) = static_cast<int32_t>(cpu::argmax_row(x.data<float>() + i * x.stride(0), x.size(1)));
    }
  } else if (x.device().is_cuda()) {
    RLM_IF_CUDA(c, x.device(),
                cuda::argmax(x.device().index, x.data<float>(), x.size(0), x.size(1), row_stride(x),
                             out.data<int32_t>(), out.stride(0)));
  } else {
    c.not_built(x.device());
  }
}

void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, const Tensor& out) {
  OpCheck c("sample");
  check_logits(c, "logits", logits);
  if (logits.size(1) == 0) c.fail_with(str("logits ", logits.describe(), " has empty rows"));
  c.dtype("out", out, {DType::kI32});
  c.dims("out", out, 1, "[n]");
  c.size("out", out, 0, logits.size(0), "n (logits.size(0))");
  c.same_device(logits, "out", out);
  if (static_cast<int64_t>(rows.size()) != logits.size(0)) {
    c.fail_with(str(rows.size(), " sampling rows given for logits ", logits.describe()));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingRow& r = rows[i];
    if (std::isnan(r.temperature) || std::isinf(r.temperature)) {
      c.fail_with(str("row ", i, ": temperature must be finite, got ", r.temperature));
    }
    if (!(r.top_p > 0.0f && r.top_p <= 1.0f)) c.fail_with(str("row ", i, ": top_p must be in (0, 1], got ", r.top_p));
    if (!(r.min_p >= 0.0f && r.min_p <= 1.0f)) c.fail_with(str("row ", i, ": min_p must be in [0, 1], got ", r.min_p));
  }
  if (logits.device().is_cpu()) {
    for (int64_t i = 0; i < logits.size(0); ++i) {
      const SamplingRow& r = rows[i];
      const cpu::SamplingParams p{r.temperature, r.top_k, r.top_p, r.min_p, r.seed, r.step};
      out.at<int32_t>({i}) = cpu::sample_row(logits.data<float>() + i * logits.stride(0), logits.size(1), p);
    }
  } else if (logits.device().is_cuda()) {
#ifdef RADIXLM_WITH_CUDA
    std::vector<cuda::SampleRow> params(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const SamplingRow& r = rows[i];
      params[i] = {r.temperature, r.top_k, r.top_p, r.min_p, cpu::sampling_uniform(r.seed, r.step)};
    }
    cuda::sample(logits.device().index, logits.data<float>(), logits.size(0), logits.size(1), row_stride(logits),
                 params.data(), out.data<int32_t>(), out.stride(0));
#else
    c.not_built(logits.device());
#endif
  } else {
    c.not_built(logits.device());
  }
}

}  // namespace rlm::ops
