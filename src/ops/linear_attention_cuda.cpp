// CUDA branches of the Gated DeltaNet and MoE ops: device pointers and strides for kernels/cuda/.
#include "ops/linear_attention_cuda.h"

#ifdef RADIXLM_WITH_CUDA
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "kernels/cuda/gated_delta_rule_chunked.h"
#include "kernels/cuda/linear_attention.h"
#include "kernels/cuda/moe.h"
#endif

namespace rlm::ops::detail {

#ifdef RADIXLM_WITH_CUDA
namespace {

constexpr int64_t kMoeChunkTokens = 2048;  // bounds the per-call expert workspace

cuda::DeviceSegments device_segments(const OpChecker& c, const StateSegments& s, int64_t num_tokens,
                                     int64_t num_slots, int device) {
  cuda::DeviceSegments d;
  d.batch_size = s.state_slots.size(0);
  d.qo_indptr = s.qo_indptr.data<int32_t>();
  d.state_slots = s.state_slots.data<int32_t>();
  d.has_initial_state = s.has_initial_state.data<int32_t>();
  if (s.track_slots.defined()) {
    d.track_slots = s.track_slots.data<int32_t>();
    d.track_lens = s.track_lens.data<int32_t>();
  }
  const std::string error = cuda::check_segments(device, d, num_tokens, num_slots);
  if (!error.empty()) c.fail_with(error);
  return d;
}

// The chunked gated delta rule kernel is opt-in (RADIXLM_GDN_CHUNKED=1, read at every call so tests
// can switch it) and only for calls of at least one chunk of tokens; shorter calls (decode batches,
// short extends) keep the token-by-token kernel.
bool use_chunked_gdr(int64_t num_tokens) {
  const char* env = std::getenv("RADIXLM_GDN_CHUNKED");
  return env != nullptr && std::string_view(env) == "1" && num_tokens >= cuda::kGdrChunk;
}

cuda::Rows rows_of(const Tensor& t) {
  cuda::Rows r;
  r.data = const_cast<float*>(t.data<float>());
  r.n0 = t.size(0);
  r.stride0 = t.stride(0);
  if (t.dim() == 3) {
    r.n1 = t.size(1);
    r.stride1 = t.stride(1);
  }
  return r;
}

// A stacked expert tensor (and its FP8 scales) as the kernels take it.
cuda::MoeExpertWeights expert_weights(const Tensor& w, const Fp8Scales& fp8) {
  cuda::MoeExpertWeights e;
  e.data = w.data_ptr();
  e.dtype = w.dtype();
  if (fp8.defined()) {
    e.fp8_scale = fp8.weight_scale.data<float>();
    e.block_n = fp8.block_n;
    e.block_k = fp8.block_k;
  }
  return e;
}

}  // namespace

void cuda_causal_conv1d(const OpChecker& c, const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                        const Tensor& conv_state, const StateSegments& segments, bool silu, const Tensor& out) {
  const int dev = x.device().index;
  const int64_t n = x.size(0), conv_dim = x.size(1);
  const cuda::DeviceSegments seg = device_segments(c, segments, n, conv_state.size(0), dev);
  const Tensor w = weight.contiguous();
  const Tensor b = bias ? bias->contiguous() : Tensor();
  cuda::causal_conv1d(dev, x.data<float>(), stride_or(x, 0, conv_dim), n, conv_dim, w.data_ptr(), w.dtype(),
                      bias ? b.data_ptr() : nullptr, bias ? b.dtype() : DType::kF32, weight.size(1),
                      conv_state.data<float>(), seg, silu, out.data<float>(), stride_or(out, 0, conv_dim));
}

void cuda_gated_delta_rule(const OpChecker& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                           const Tensor& beta, const Tensor& ssm_state, const StateSegments& segments,
                           const GatedDeltaRuleParams& params, bool chunked, const Tensor& out) {
  const int64_t hk = q.size(1), dk = q.size(2), hv = v.size(1), dv = v.size(2);
  if (dk > cuda::kMaxGdrHeadDim || dv > cuda::kMaxGdrHeadDim) {
    c.fail_with(str("head_k_dim ", dk, " and head_v_dim ", dv, " must be at most ", cuda::kMaxGdrHeadDim,
                    " on CUDA"));
  }
  const int dev = q.device().index;
  const cuda::DeviceSegments seg = device_segments(c, segments, q.size(0), ssm_state.size(0), dev);
  cuda::GdrArgs in;
  in.q = q.data<float>();
  in.q_st = stride_or(q, 0, hk * dk);
  in.q_sh = stride_or(q, 1, dk);
  in.k = k.data<float>();
  in.k_st = stride_or(k, 0, hk * dk);
  in.k_sh = stride_or(k, 1, dk);
  in.v = v.data<float>();
  in.v_st = stride_or(v, 0, hv * dv);
  in.v_sh = stride_or(v, 1, dv);
  in.g = g.data<float>();
  in.ldg = stride_or(g, 0, hv);
  in.beta = beta.data<float>();
  in.ldbeta = stride_or(beta, 0, hv);
  in.num_k_heads = hk;
  in.num_v_heads = hv;
  in.head_k_dim = dk;
  in.head_v_dim = dv;
  in.scale = params.scale;
  in.l2norm = params.use_qk_l2norm;
  if (chunked && use_chunked_gdr(q.size(0))) {
    cuda::gated_delta_rule_chunked(dev, in, ssm_state.data<float>(), seg, params.chunk_size, out.data<float>());
  } else {
    cuda::gated_delta_rule(dev, in, ssm_state.data<float>(), seg, out.data<float>());
  }
}

void cuda_gdn_gating(const OpChecker&, const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                     const Tensor& g, const Tensor& beta) {
  const int64_t hv = a.size(1);
  const Tensor al = A_log.contiguous(), dt = dt_bias.contiguous();
  cuda::gdn_gating(a.device().index, a.data<float>(), stride_or(a, 0, hv), b.data<float>(), stride_or(b, 0, hv),
                   a.size(0), hv, al.data_ptr(), al.dtype(), dt.data_ptr(), dt.dtype(), g.data<float>(),
                   stride_or(g, 0, hv), beta.data<float>(), stride_or(beta, 0, hv));
}

void cuda_rms_norm_gated(const OpChecker&, const Tensor& x, const Tensor& z, const Tensor& weight, float eps,
                         const Tensor& out) {
  const Tensor w = weight.contiguous();
  cuda::rms_norm_gated(x.device().index, rows_of(x), rows_of(z), rows_of(out), x.size(-1), w.data_ptr(), w.dtype(),
                       eps);
}

void cuda_sigmoid_mul(const OpChecker&, const Tensor& x, const Tensor& gate, const Tensor& out) {
  cuda::sigmoid_mul(x.device().index, rows_of(x), rows_of(gate), rows_of(out), x.size(-1));
}

void cuda_sigmoid_gate_add(const OpChecker&, const Tensor& x, const Tensor& gate, const Tensor& out) {
  const int64_t d = x.size(1);
  cuda::sigmoid_gate_add(x.device().index, x.data<float>(), stride_or(x, 0, d), gate.data<float>(),
                         stride_or(gate, 0, 1), x.size(0), d, out.data<float>(), stride_or(out, 0, d));
}

void cuda_moe_topk_softmax(const OpChecker& c, const Tensor& router_logits, bool renormalize, const Tensor& topk_weights,
                           const Tensor& topk_ids) {
  const int64_t experts = router_logits.size(1), top_k = topk_ids.size(1);
  if (top_k > cuda::kMaxMoeTopK) c.fail_with(str("top_k = ", top_k, " exceeds ", cuda::kMaxMoeTopK, " on CUDA"));
  if (experts > 8192) c.fail_with(str("num_experts = ", experts, " exceeds 8192 on CUDA"));
  cuda::moe_topk_softmax(router_logits.device().index, router_logits.data<float>(),
                         stride_or(router_logits, 0, experts), router_logits.size(0), experts, top_k, renormalize,
                         topk_weights.data<float>(), topk_ids.data<int32_t>());
}

void cuda_moe_experts(const OpChecker& c, const Tensor& x, const Tensor& w_gate_up, const Tensor& w_down,
                      const Tensor& topk_weights, const Tensor& topk_ids, const Tensor& out,
                      const MoeFp8Scales& fp8) {
  if (fp8.defined() && fp8_linear_activations() == Fp8Activations::kF32) {
    c.fail_with("the f32-activation reference mode (RADIXLM_FP8_ACTIVATIONS=f32) is CPU-only");
  }
  const int64_t n = x.size(0), hidden = x.size(1), experts = w_gate_up.size(0), inter = w_gate_up.size(1) / 2;
  const int64_t top_k = topk_ids.size(1);
  if (top_k > cuda::kMaxMoeTopK) c.fail_with(str("top_k = ", top_k, " exceeds ", cuda::kMaxMoeTopK, " on CUDA"));
  if (n == 0) return;
  const Device dev = x.device();
  const int64_t chunk = std::min(n, kMoeChunkTokens), entries = chunk * top_k;
  Tensor counts = Tensor::empty({experts + 1}, DType::kI32, dev);
  Tensor sorted_token = Tensor::empty({entries}, DType::kI32, dev);
  Tensor row_of_entry = Tensor::empty({entries}, DType::kI32, dev);
  Tensor xs = Tensor::empty({entries, hidden}, DType::kF32, dev);
  Tensor gate_up = Tensor::empty({entries, 2 * inter}, DType::kF32, dev);
  Tensor act = Tensor::empty({entries, inter}, DType::kF32, dev);
  Tensor y = Tensor::empty({entries, hidden}, DType::kF32, dev);
  cuda::MoeWorkspace ws{counts.data<int32_t>(), sorted_token.data<int32_t>(), row_of_entry.data<int32_t>(),
                        xs.data<float>(), gate_up.data<float>(), act.data<float>(), y.data<float>()};
  const int64_t ldx = stride_or(x, 0, hidden), ldo = stride_or(out, 0, hidden);
  const cuda::MoeExpertWeights gate_up_w = expert_weights(w_gate_up, fp8.gate_up);
  const cuda::MoeExpertWeights down_w = expert_weights(w_down, fp8.down);
  for (int64_t t0 = 0; t0 < n; t0 += chunk) {
    const int64_t m = std::min(chunk, n - t0);
    const std::string error = cuda::moe_experts(
        dev.index, x.data<float>() + t0 * ldx, ldx, m, hidden, inter, experts, gate_up_w, down_w,
        topk_weights.data<float>() + t0 * top_k, topk_ids.data<int32_t>() + t0 * top_k, top_k, ws,
        out.data<float>() + t0 * ldo, ldo);
    if (!error.empty()) c.fail_with(t0 == 0 ? error : str(error, " (tokens counted from ", t0, ")"));
  }
}

#else  // built without CUDA: the ops report that no kernel exists for the device

void cuda_causal_conv1d(const OpChecker& c, const Tensor& x, const Tensor&, const std::optional<Tensor>&,
                        const Tensor&, const StateSegments&, bool, const Tensor&) {
  c.not_built(x.device());
}
void cuda_gated_delta_rule(const OpChecker& c, const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const StateSegments&, const GatedDeltaRuleParams&, bool,
                           const Tensor&) {
  c.not_built(q.device());
}
void cuda_gdn_gating(const OpChecker& c, const Tensor& a, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&) {
  c.not_built(a.device());
}
void cuda_rms_norm_gated(const OpChecker& c, const Tensor& x, const Tensor&, const Tensor&, float, const Tensor&) {
  c.not_built(x.device());
}
void cuda_sigmoid_mul(const OpChecker& c, const Tensor& x, const Tensor&, const Tensor&) { c.not_built(x.device()); }
void cuda_sigmoid_gate_add(const OpChecker& c, const Tensor& x, const Tensor&, const Tensor&) {
  c.not_built(x.device());
}
void cuda_moe_topk_softmax(const OpChecker& c, const Tensor& router_logits, bool, const Tensor&, const Tensor&) {
  c.not_built(router_logits.device());
}
void cuda_moe_experts(const OpChecker& c, const Tensor& x, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&, const Tensor&, const MoeFp8Scales&) {
  c.not_built(x.device());
}

#endif

}  // namespace rlm::ops::detail
