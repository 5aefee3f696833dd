// ops:: for Gated DeltaNet layers: boundary checks, then the kernels of the tensors' device
// (kernels/cpu/ only so far; other devices fail with a clear message until their twins exist).
#include "ops/linear_attention_ops.h"

#include <set>
#include <vector>

#include "kernels/cpu/causal_conv1d.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "kernels/cpu/gdn_gates.h"
#include "ops/linear_attention_cuda.h"
#include "ops/op_check.h"

namespace rlm::ops {
namespace {

using detail::OpChecker;

// The validated index arrays of a StateSegments on the CPU (contiguous copies kept alive here).
struct HostSegments {
  Tensor qo_indptr, state_slots, has_initial_state, track_slots, track_lens;
  cpu::SegmentIndex index;
};

Tensor index_tensor(const OpChecker& c, const char* name, const Tensor& t, int64_t n, const Tensor& ref) {
  c.dtype(name, t, {DType::kI32});
  c.dims(name, t, 1, "[batch_size]");
  c.size(name, t, 0, n, "the batch size (+1 for qo_indptr)");
  c.same_device(ref, name, t);
  return t.contiguous();
}

HostSegments check_segments(const OpChecker& c, const StateSegments& s, int64_t num_tokens, int64_t num_slots,
                            const Tensor& ref) {
  HostSegments h;
  c.defined("segments.state_slots", s.state_slots);
  const int64_t bs = s.state_slots.dim() == 1 ? s.state_slots.size(0) : -1;
  if (bs < 0) c.fail_with(str("segments.state_slots ", s.state_slots.describe(), " must be 1-D [batch_size]"));
  h.qo_indptr = index_tensor(c, "segments.qo_indptr", s.qo_indptr, bs + 1, ref);
  h.state_slots = index_tensor(c, "segments.state_slots", s.state_slots, bs, ref);
  h.has_initial_state = index_tensor(c, "segments.has_initial_state", s.has_initial_state, bs, ref);
  if (s.track_slots.defined() != s.track_lens.defined()) {
    c.fail_with("segments.track_slots and segments.track_lens must be given together");
  }
  if (s.track_slots.defined()) {
    h.track_slots = index_tensor(c, "segments.track_slots", s.track_slots, bs, ref);
    h.track_lens = index_tensor(c, "segments.track_lens", s.track_lens, bs, ref);
  }
  if (!ref.device().is_cpu()) return h;  // the device twin validates its own index data
  const int32_t* indptr = h.qo_indptr.data<int32_t>();
  const int32_t* slots = h.state_slots.data<int32_t>();
  const int32_t* tslots = s.track_slots.defined() ? h.track_slots.data<int32_t>() : nullptr;
  const int32_t* tlens = s.track_slots.defined() ? h.track_lens.data<int32_t>() : nullptr;
  if (indptr[0] != 0) c.fail_with(str("segments.qo_indptr[0] must be 0, got ", indptr[0]));
  if (indptr[bs] != num_tokens) {
    c.fail_with(str("segments.qo_indptr[", bs, "] = ", indptr[bs], " must equal num_tokens = ", num_tokens));
  }
  std::set<int32_t> used;
  auto claim = [&](int32_t slot, int64_t r, const char* what) {
    if (slot < 0 || slot >= num_slots) {
      c.fail_with(str(what, " ", slot, " of request ", r, " is outside the state pool [0, ", num_slots, ")"));
    }
    if (!used.insert(slot).second) c.fail_with(str(what, " ", slot, " of request ", r, " is used twice in one call"));
  };
  for (int64_t r = 0; r < bs; ++r) {
    const int64_t len = indptr[r + 1] - indptr[r];
    if (len < 0) c.fail_with(str("segments.qo_indptr decreases at request ", r));
    claim(slots[r], r, "state slot");
    if (tslots != nullptr && tslots[r] >= 0) {
      claim(tslots[r], r, "track slot");
      if (tlens[r] < 1 || tlens[r] > len) {
        c.fail_with(str("track length ", tlens[r], " of request ", r, " must be in [1, ", len, "] (its new tokens)"));
      }
    } else if (tslots != nullptr && tslots[r] != -1) {
      c.fail_with(str("track slot ", tslots[r], " of request ", r, " must be -1 (none) or a slot"));
    }
  }
  h.index.batch_size = bs;
  h.index.qo_indptr = indptr;
  h.index.state_slots = slots;
  h.index.has_initial_state = h.has_initial_state.data<int32_t>();
  h.index.track_slots = tslots;
  h.index.track_lens = tlens;
  return h;
}

// The checked, contiguous index tensors (for the device twins, which validate their contents).
StateSegments checked(const HostSegments& h) {
  return StateSegments{h.qo_indptr, h.state_slots, h.has_initial_state, h.track_slots, h.track_lens};
}

// A 2-D [n, d] or 3-D [n, heads, d] f32 tensor as rows for the row kernels.
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

void check_rows(const OpChecker& c, const char* name, const Tensor& t) {
  c.dtype(name, t, {DType::kF32});
  if (t.dim() != 2 && t.dim() != 3) c.fail_with(str(name, " ", t.describe(), " must be 2-D [n, d] or 3-D [n, heads, d]"));
  c.unit_last_stride(name, t);
}

void check_vector(const OpChecker& c, const char* name, const Tensor& t, int64_t n, const char* what,
                  const Tensor& ref) {
  c.dtype(name, t, {DType::kF32, DType::kBF16, DType::kF16});
  c.dims(name, t, 1, "[n]");
  c.size(name, t, 0, n, what);
  c.same_device(ref, name, t);
}

std::vector<float> to_f32_vector(const Tensor& t) {
  const Tensor f = t.contiguous().to(DType::kF32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

void gated_delta_rule_op(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                         const Tensor& beta, const Tensor& ssm_state, const StateSegments& segments,
                         const GatedDeltaRuleParams& params, const Tensor& out, bool chunked) {
  OpChecker c(op);
  c.dtype("q", q, {DType::kF32});
  c.dims("q", q, 3, "[num_tokens, num_k_heads, head_k_dim]");
  const int64_t n = q.size(0), hk = q.size(1), dk = q.size(2);
  c.dtype("k", k, {DType::kF32});
  c.dims("k", k, 3, "[num_tokens, num_k_heads, head_k_dim]");
  c.same_shape("k", k, "q", q);
  c.dtype("v", v, {DType::kF32});
  c.dims("v", v, 3, "[num_tokens, num_v_heads, head_v_dim]");
  c.size("v", v, 0, n, "num_tokens");
  const int64_t hv = v.size(1), dv = v.size(2);
  if (hk <= 0 || hv % hk != 0) c.fail_with(str("num_v_heads (", hv, ") must be a multiple of num_k_heads (", hk, ")"));
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"g", &g}, {"beta", &beta}}) {
    c.dtype(name, *t, {DType::kF32});
    c.dims(name, *t, 2, "[num_tokens, num_v_heads]");
    c.size(name, *t, 0, n, "num_tokens");
    c.size(name, *t, 1, hv, "num_v_heads");
    c.unit_last_stride(name, *t);
    c.same_device(q, name, *t);
  }
  c.unit_last_stride("q", q);
  c.unit_last_stride("k", k);
  c.unit_last_stride("v", v);
  c.dtype("ssm_state", ssm_state, {DType::kF32});
  c.dims("ssm_state", ssm_state, 4, "[num_slots, num_v_heads, head_k_dim, head_v_dim]");
  c.size("ssm_state", ssm_state, 1, hv, "num_v_heads");
  c.size("ssm_state", ssm_state, 2, dk, "head_k_dim");
  c.size("ssm_state", ssm_state, 3, dv, "head_v_dim");
  c.contiguous("ssm_state", ssm_state);
  c.dtype("out", out, {DType::kF32});
  c.dims("out", out, 3, "[num_tokens, num_v_heads, head_v_dim]");
  c.same_shape("out", out, "v", v);
  c.contiguous("out", out);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"ssm_state", &ssm_state},
                                {"out", &out}}) {
    c.same_device(q, name, *t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"g", &g},
                                {"beta", &beta}, {"ssm_state", &ssm_state}}) {
    if (detail::memory_overlaps(out, *t)) c.fail_with(str("out ", out.describe(), " overlaps ", name));
  }
  if (chunked && (params.chunk_size < 1 || params.chunk_size > 1024)) {
    c.fail_with(str("chunk_size must be in [1, 1024], got ", params.chunk_size));
  }
  const HostSegments seg = check_segments(c, segments, n, ssm_state.size(0), q);
  if (q.device().is_cuda()) return detail::cuda_gated_delta_rule(c, q, k, v, g, beta, ssm_state, checked(seg), params, chunked, out);
  if (!q.device().is_cpu()) c.not_built(q.device());
  cpu::GdrInputs in;
  in.q = q.data<float>();
  in.q_st = detail::stride_or(q, 0, hk * dk);
  in.q_sh = detail::stride_or(q, 1, dk);
  in.k = k.data<float>();
  in.k_st = detail::stride_or(k, 0, hk * dk);
  in.k_sh = detail::stride_or(k, 1, dk);
  in.v = v.data<float>();
  in.v_st = detail::stride_or(v, 0, hv * dv);
  in.v_sh = detail::stride_or(v, 1, dv);
  in.g = g.data<float>();
  in.ldg = detail::stride_or(g, 0, hv);
  in.beta = beta.data<float>();
  in.ldbeta = detail::stride_or(beta, 0, hv);
  in.num_k_heads = hk;
  in.num_v_heads = hv;
  in.head_k_dim = dk;
  in.head_v_dim = dv;
  cpu::gated_delta_rule(in, ssm_state.data<float>(), seg.index, params.scale, params.use_qk_l2norm,
                        chunked ? params.chunk_size : 0, out.data<float>());
}

}  // namespace

void causal_conv1d(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias,
                   const Tensor& conv_state, const StateSegments& segments, bool silu, const Tensor& out) {
  OpChecker c("causal_conv1d");
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[num_tokens, conv_dim]");
  c.unit_last_stride("x", x);
  const int64_t n = x.size(0), conv_dim = x.size(1);
  c.dtype("weight", weight, {DType::kF32, DType::kBF16, DType::kF16});
  c.dims("weight", weight, 2, "[conv_dim, kernel_size]");
  c.size("weight", weight, 0, conv_dim, "conv_dim");
  const int64_t kernel = weight.size(1);
  if (kernel < 1) c.fail_with(str("weight ", weight.describe(), " has no taps"));
  c.same_device(x, "weight", weight);
  if (bias) check_vector(c, "bias", *bias, conv_dim, "conv_dim", x);
  c.dtype("conv_state", conv_state, {DType::kF32});
  c.dims("conv_state", conv_state, 3, "[num_slots, conv_dim, kernel_size - 1]");
  c.size("conv_state", conv_state, 1, conv_dim, "conv_dim");
  c.size("conv_state", conv_state, 2, kernel - 1, "kernel_size - 1");
  c.contiguous("conv_state", conv_state);
  c.same_device(x, "conv_state", conv_state);
  c.dtype("out", out, {DType::kF32});
  c.dims("out", out, 2, "[num_tokens, conv_dim]");
  c.same_shape("out", out, "x", x);
  c.unit_last_stride("out", out);
  c.same_device(x, "out", out);
  const bool in_place = out.data_ptr() == x.data_ptr() && out.strides() == x.strides();
  if (!in_place && detail::memory_overlaps(out, x)) c.fail_with(str("out ", out.describe(), " overlaps x without being x"));
  if (detail::memory_overlaps(out, conv_state) || detail::memory_overlaps(x, conv_state)) {
    c.fail_with("conv_state overlaps x or out");
  }
  const HostSegments seg = check_segments(c, segments, n, conv_state.size(0), x);
  if (x.device().is_cuda()) return detail::cuda_causal_conv1d(c, x, weight, bias, conv_state, checked(seg), silu, out);
  if (!x.device().is_cpu()) c.not_built(x.device());
  const std::vector<float> w = to_f32_vector(weight);
  std::vector<float> b;
  if (bias) b = to_f32_vector(*bias);
  cpu::causal_conv1d(x.data<float>(), detail::stride_or(x, 0, conv_dim), conv_dim, w.data(),
                     bias ? b.data() : nullptr, kernel, conv_state.data<float>(), seg.index, silu, out.data<float>(),
                     detail::stride_or(out, 0, conv_dim));
}

void chunk_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                            const Tensor& ssm_state, const StateSegments& segments,
                            const GatedDeltaRuleParams& params, const Tensor& out) {
  gated_delta_rule_op("chunk_gated_delta_rule", q, k, v, g, beta, ssm_state, segments, params, out, true);
}

void recurrent_gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const Tensor& ssm_state, const StateSegments& segments,
                                const GatedDeltaRuleParams& params, const Tensor& out) {
  gated_delta_rule_op("recurrent_gated_delta_rule", q, k, v, g, beta, ssm_state, segments, params, out, false);
}

void gdn_gating(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& g,
                const Tensor& beta) {
  OpChecker c("gdn_gating");
  c.dtype("a", a, {DType::kF32});
  c.dims("a", a, 2, "[num_tokens, num_v_heads]");
  const int64_t n = a.size(0), hv = a.size(1);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"a", &a}, {"b", &b}, {"g", &g}, {"beta", &beta}}) {
    c.dtype(name, *t, {DType::kF32});
    c.dims(name, *t, 2, "[num_tokens, num_v_heads]");
    c.same_shape(name, *t, "a", a);
    c.unit_last_stride(name, *t);
    c.same_device(a, name, *t);
  }
  check_vector(c, "A_log", A_log, hv, "num_v_heads", a);
  check_vector(c, "dt_bias", dt_bias, hv, "num_v_heads", a);
  if (detail::memory_overlaps(g, beta)) c.fail_with("g and beta overlap");
  if (a.device().is_cuda()) return detail::cuda_gdn_gating(c, a, b, A_log, dt_bias, g, beta);
  if (!a.device().is_cpu()) c.not_built(a.device());
  const std::vector<float> al = to_f32_vector(A_log), dt = to_f32_vector(dt_bias);
  cpu::gdn_gating(a.data<float>(), detail::stride_or(a, 0, hv), b.data<float>(), detail::stride_or(b, 0, hv), n, hv,
                  al.data(), dt.data(), g.data<float>(), detail::stride_or(g, 0, hv), beta.data<float>(),
                  detail::stride_or(beta, 0, hv));
}

void rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& weight, float eps, const Tensor& out) {
  OpChecker c("rms_norm_gated");
  check_rows(c, "x", x);
  check_rows(c, "z", z);
  check_rows(c, "out", out);
  c.same_shape("z", z, "x", x);
  c.same_shape("out", out, "x", x);
  check_vector(c, "weight", weight, x.size(-1), "the row length d", x);
  c.same_device(x, "z", z);
  c.same_device(x, "out", out);
  if (x.device().is_cuda()) return detail::cuda_rms_norm_gated(c, x, z, weight, eps, out);
  if (!x.device().is_cpu()) c.not_built(x.device());
  cpu::rms_norm_gated(row_set(x), row_set(z), row_set(out), x.size(-1), weight.contiguous().data_ptr(), weight.dtype(),
                      eps);
}

void sigmoid_mul(const Tensor& x, const Tensor& gate, const Tensor& out) {
  OpChecker c("sigmoid_mul");
  check_rows(c, "x", x);
  check_rows(c, "gate", gate);
  check_rows(c, "out", out);
  c.same_shape("gate", gate, "x", x);
  c.same_shape("out", out, "x", x);
  c.same_device(x, "gate", gate);
  c.same_device(x, "out", out);
  if (x.device().is_cuda()) return detail::cuda_sigmoid_mul(c, x, gate, out);
  if (!x.device().is_cpu()) c.not_built(x.device());
  cpu::sigmoid_mul(row_set(x), row_set(gate), row_set(out), x.size(-1));
}

void sigmoid_gate_add(const Tensor& x, const Tensor& gate, const Tensor& out) {
  OpChecker c("sigmoid_gate_add");
  c.dtype("x", x, {DType::kF32});
  c.dims("x", x, 2, "[n, d]");
  c.unit_last_stride("x", x);
  c.dtype("gate", gate, {DType::kF32});
  c.dims("gate", gate, 2, "[n, 1]");
  c.size("gate", gate, 0, x.size(0), "n");
  c.size("gate", gate, 1, 1, "1");
  c.dtype("out", out, {DType::kF32});
  c.dims("out", out, 2, "[n, d]");
  c.same_shape("out", out, "x", x);
  c.unit_last_stride("out", out);
  c.same_device(x, "gate", gate);
  c.same_device(x, "out", out);
  if (detail::memory_overlaps(out, x)) c.fail_with("out overlaps x");
  if (x.device().is_cuda()) return detail::cuda_sigmoid_gate_add(c, x, gate, out);
  if (!x.device().is_cpu()) c.not_built(x.device());
  const int64_t d = x.size(1);
  cpu::sigmoid_gate_add(x.data<float>(), detail::stride_or(x, 0, d), gate.data<float>(), detail::stride_or(gate, 0, 1),
                        x.size(0), d, out.data<float>(), detail::stride_or(out, 0, d));
}

}  // namespace rlm::ops
