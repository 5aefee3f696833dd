// ops:: for sparse MoE blocks: boundary checks, then the kernels of the tensors' device.
#include "ops/moe_ops.h"

#include "kernels/cpu/moe.h"
#include "ops/linear_attention_cuda.h"
#include "ops/op_check.h"
#include "ops/ops.h"

namespace rlm::ops {

using detail::OpChecker;

void moe_topk_softmax(const Tensor& router_logits, bool renormalize, const Tensor& topk_weights,
                      const Tensor& topk_ids) {
  OpChecker c("moe_topk_softmax");
  c.dtype("router_logits", router_logits, {DType::kF32});
  c.dims("router_logits", router_logits, 2, "[num_tokens, num_experts]");
  c.unit_last_stride("router_logits", router_logits);
  const int64_t n = router_logits.size(0), experts = router_logits.size(1);
  c.dtype("topk_weights", topk_weights, {DType::kF32});
  c.dims("topk_weights", topk_weights, 2, "[num_tokens, top_k]");
  c.size("topk_weights", topk_weights, 0, n, "num_tokens");
  c.contiguous("topk_weights", topk_weights);
  c.dtype("topk_ids", topk_ids, {DType::kI32});
  c.dims("topk_ids", topk_ids, 2, "[num_tokens, top_k]");
  c.same_shape("topk_ids", topk_ids, "topk_weights", topk_weights);
  c.contiguous("topk_ids", topk_ids);
  const int64_t top_k = topk_weights.size(1);
  if (top_k < 1 || top_k > experts) c.fail_with(str("top_k = ", top_k, " must be in [1, num_experts = ", experts, "]"));
  c.same_device(router_logits, "topk_weights", topk_weights);
  c.same_device(router_logits, "topk_ids", topk_ids);
  if (router_logits.device().is_cuda()) {
    return detail::cuda_moe_topk_softmax(c, router_logits, renormalize, topk_weights, topk_ids);
  }
  if (!router_logits.device().is_cpu()) c.not_built(router_logits.device());
  if (n == 0) return;
  cpu::moe_topk_softmax(router_logits.data<float>(), detail::stride_or(router_logits, 0, experts), n, experts, top_k,
                        renormalize, topk_weights.data<float>(), topk_ids.data<int32_t>());
}

Fp8Scales expert_fp8_scales(const Fp8Scales& stacked, int64_t e) {
  Fp8Scales s;
  s.weight_scale = stacked.weight_scale.select(0, e);
  s.block_n = stacked.block_n;
  s.block_k = stacked.block_k;
  return s;
}

namespace {

// The scales of a stacked f8e4m3 projection [num_experts, rows, cols] (see MoeFp8Scales).
void check_expert_fp8_scales(OpChecker& c, const char* name, const Fp8Scales& s, const Tensor& x,
                             int64_t experts, int64_t rows, int64_t cols) {
  const Tensor& ws = s.weight_scale;
  if (!ws.defined()) c.fail_with(str(name, " is f8e4m3: pass its scales (MoeFp8Scales)"));
  const std::string what = str(name, " scales");
  c.dtype(what.c_str(), ws, {DType::kF32});
  c.contiguous(what.c_str(), ws);
  c.same_device(x, what.c_str(), ws);
  if (s.input_scale.defined())
    c.fail_with(str(name, ": static input scales are not supported for MoE experts"));
  if (s.block_n < 0 || s.block_k < 0 || (s.block_n == 0) != (s.block_k == 0)) {
    c.fail_with(
        str(name, ": block size ", s.block_n, " x ", s.block_k, " must be two positive sizes or 0 x 0"));
  }
  const bool blocks = s.block_n > 0;
  const Shape want =
      blocks ? Shape{experts, (rows + s.block_n - 1) / s.block_n, (cols + s.block_k - 1) / s.block_k}
             : Shape{experts, rows};
  if (ws.shape() != want) {
    c.fail_with(str(what, " ", ws.describe(), " must have shape ", shape_to_string(want),
                    blocks ? str(" (", s.block_n, " x ", s.block_k, " blocks per expert)")
                           : " (one scale per expert and output channel)"));
  }
}

}  // namespace

void moe_experts(const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down, const Tensor& topk_weights,
                 const Tensor& topk_ids, const Tensor& out, const MoeFp8Scales& fp8) {
  OpChecker c("moe_experts");
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[num_tokens, hidden]");
  c.unit_last_stride("x", x);
  const int64_t n = x.size(0), hidden = x.size(1);
  const bool is_fp8 = w_gate_up.defined() && w_gate_up.dtype() == DType::kF8E4M3;
  if (is_fp8) {
    c.dtype("w_down", w_down, {DType::kF8E4M3});
  } else if (fp8.defined()) {
    c.fail_with(str("FP8 scales given for w_gate_up ", w_gate_up.describe(), ", which is not f8e4m3"));
  } else if (!is_quantized(w_gate_up.dtype())) {
    c.dtype("w_gate_up", w_gate_up, {DType::kF32, DType::kBF16, DType::kF16});
  }
  c.dims("w_gate_up", w_gate_up, 3, "[num_experts, 2 * inter, hidden]");
  c.size("w_gate_up", w_gate_up, 2, hidden, "hidden");
  c.contiguous("w_gate_up", w_gate_up);
  const int64_t experts = w_gate_up.size(0), inter = w_gate_up.size(1) / 2;
  if (w_gate_up.size(1) % 2 != 0) c.fail_with(str("w_gate_up ", w_gate_up.describe(), ": dimension 1 must be even"));
  // Block-quantized experts: either projection may be quantized, each in its own type (every GGUF
  // block type runs on the CPU and on CUDA, as in ops::linear); two float ones share one dtype.
  const bool quantized = is_quantized(w_gate_up.dtype()) || is_quantized(w_down.dtype());
  if (!is_fp8 && w_down.defined() && w_down.dtype() == DType::kF8E4M3) {
    c.fail_with(
        str("w_down is f8e4m3 but w_gate_up is ", w_gate_up.describe(), ": FP8 experts take both f8e4m3"));
  }
  if (!is_fp8 && !is_quantized(w_down.dtype())) {
    c.dtype("w_down", w_down,
            quantized ? std::initializer_list<DType>{DType::kF32, DType::kBF16, DType::kF16}
                      : std::initializer_list<DType>{w_gate_up.dtype()});
  }
  c.dims("w_down", w_down, 3, "[num_experts, hidden, inter]");
  c.size("w_down", w_down, 0, experts, "num_experts");
  c.size("w_down", w_down, 1, hidden, "hidden");
  c.size("w_down", w_down, 2, inter, "inter");
  c.contiguous("w_down", w_down);
  if (is_fp8) {
    check_expert_fp8_scales(c, "w_gate_up", fp8.gate_up, x, experts, 2 * inter, hidden);
    check_expert_fp8_scales(c, "w_down", fp8.down, x, experts, hidden, inter);
    if (fp8.gate_up.block_n > 0 && inter % fp8.gate_up.block_n != 0) {
      c.fail_with(str("w_gate_up block scales: inter = ", inter,
                      " is not a multiple of block_n = ", fp8.gate_up.block_n,
                      " (the stacked gate/up rows would not keep each part's block grid)"));
    }
  }
  c.dtype("topk_weights", topk_weights, {DType::kF32});
  c.dims("topk_weights", topk_weights, 2, "[num_tokens, top_k]");
  c.size("topk_weights", topk_weights, 0, n, "num_tokens");
  c.contiguous("topk_weights", topk_weights);
  c.dtype("topk_ids", topk_ids, {DType::kI32});
  c.dims("topk_ids", topk_ids, 2, "[num_tokens, top_k]");
  c.same_shape("topk_ids", topk_ids, "topk_weights", topk_weights);
  c.contiguous("topk_ids", topk_ids);
  c.dtype("out", out, {DType::kF32});
  c.dims("out", out, 2, "[num_tokens, hidden]");
  c.same_shape("out", out, "x", x);
  c.unit_last_stride("out", out);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"w_gate_up", &w_gate_up}, {"w_down", &w_down},
                                {"topk_weights", &topk_weights}, {"topk_ids", &topk_ids}, {"out", &out}}) {
    c.same_device(x, name, *t);
  }
  if (detail::memory_overlaps(out, x)) c.fail_with("out overlaps x");
  if (x.device().is_cuda()) {
    return detail::cuda_moe_experts(c, x, w_gate_up, w_down, topk_weights, topk_ids, out, fp8);
  }
  if (!x.device().is_cpu()) c.not_built(x.device());
  const int64_t top_k = topk_ids.size(1);
  const int32_t* ids = topk_ids.data<int32_t>();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = ids[t * top_k + j];
      if (e < 0 || e >= experts) {
        c.fail_with(str("topk_ids[", t, ", ", j, "] = ", e, " is outside [0, num_experts = ", experts, ")"));
      }
      for (int64_t i = 0; i < j; ++i) {
        if (ids[t * top_k + i] == e) c.fail_with(str("token ", t, " lists expert ", e, " twice"));
      }
    }
  }
  if (n == 0) return;
  // Expert e's matrix through ops::linear: the float kernels, the quantized ones (8-bit or f32
  // activations as ops::quantized_linear_activations() says) or, with FP8 scales, the FP8 linear
  // with expert e's scales (e4m3 or f32 activations as ops::fp8_linear_activations() says).
  auto expert_linear = [](const Tensor& w, const Fp8Scales& scales) {
    return [&w, &scales](int64_t e, const float* xs, int64_t m, float* ys) {
      const Tensor xt =
          Tensor::from_blob(const_cast<float*>(xs), {m, w.size(2)}, DType::kF32, Device::cpu(), nullptr);
      const Tensor yt = Tensor::from_blob(ys, {m, w.size(1)}, DType::kF32, Device::cpu(), nullptr);
      if (scales.defined()) return linear(xt, w.select(0, e), std::nullopt, yt, expert_fp8_scales(scales, e));
      linear(xt, w.select(0, e), std::nullopt, yt);
    };
  };
  cpu::moe_experts(x.data<float>(), detail::stride_or(x, 0, hidden), n, hidden, inter, experts,
                   expert_linear(w_gate_up, fp8.gate_up), expert_linear(w_down, fp8.down),
                   topk_weights.data<float>(), ids, top_k, out.data<float>(),
                   detail::stride_or(out, 0, hidden));
}

}  // namespace rlm::ops
