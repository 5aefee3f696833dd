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

void moe_experts(const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down, const Tensor& topk_weights,
                 const Tensor& topk_ids, const Tensor& out) {
  OpChecker c("moe_experts");
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[num_tokens, hidden]");
  c.unit_last_stride("x", x);
  const int64_t n = x.size(0), hidden = x.size(1);
  if (!is_quantized(w_gate_up.dtype()))
    c.dtype("w_gate_up", w_gate_up, {DType::kF32, DType::kBF16, DType::kF16});
  c.dims("w_gate_up", w_gate_up, 3, "[num_experts, 2 * inter, hidden]");
  c.size("w_gate_up", w_gate_up, 2, hidden, "hidden");
  c.contiguous("w_gate_up", w_gate_up);
  const int64_t experts = w_gate_up.size(0), inter = w_gate_up.size(1) / 2;
  if (w_gate_up.size(1) % 2 != 0) c.fail_with(str("w_gate_up ", w_gate_up.describe(), ": dimension 1 must be even"));
  // Block-quantized experts: either projection may be quantized, each in its own type (every GGUF
  // block type runs on the CPU and on CUDA, as in ops::linear); two float ones share one dtype.
  const bool quantized = is_quantized(w_gate_up.dtype()) || is_quantized(w_down.dtype());
  if (!is_quantized(w_down.dtype())) {
    c.dtype("w_down", w_down,
            quantized ? std::initializer_list<DType>{DType::kF32, DType::kBF16, DType::kF16}
                      : std::initializer_list<DType>{w_gate_up.dtype()});
  }
  c.dims("w_down", w_down, 3, "[num_experts, hidden, inter]");
  c.size("w_down", w_down, 0, experts, "num_experts");
  c.size("w_down", w_down, 1, hidden, "hidden");
  c.size("w_down", w_down, 2, inter, "inter");
  c.contiguous("w_down", w_down);
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
  if (x.device().is_cuda()) return detail::cuda_moe_experts(c, x, w_gate_up, w_down, topk_weights, topk_ids, out);
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
  // Expert e's matrix through ops::linear: the float kernels, or the quantized ones (8-bit or f32
  // activations as ops::quantized_linear_activations() says).
  auto expert_linear = [](const Tensor& w) {
    return [&w](int64_t e, const float* xs, int64_t m, float* ys) {
      const Tensor xt =
          Tensor::from_blob(const_cast<float*>(xs), {m, w.size(2)}, DType::kF32, Device::cpu(), nullptr);
      const Tensor yt = Tensor::from_blob(ys, {m, w.size(1)}, DType::kF32, Device::cpu(), nullptr);
      linear(xt, w.select(0, e), std::nullopt, yt);
    };
  };
  cpu::moe_experts(x.data<float>(), detail::stride_or(x, 0, hidden), n, hidden, inter, experts,
                   expert_linear(w_gate_up), expert_linear(w_down), topk_weights.data<float>(), ids, top_k,
                   out.data<float>(), detail::stride_or(out, 0, hidden));
}

}  // namespace rlm::ops
