#include "model/moe.h"

#include <set>

#include "formats/gguf_dequant.h"
#include "ops/linear_attention_ops.h"
#include "ops/moe_ops.h"
#include "ops/ops.h"

namespace rlm {
namespace {

using nlohmann::json;

bool present(const json& j, const char* key) { return j.is_object() && j.contains(key) && !j.at(key).is_null(); }

// Absent: keep *out. Present: an integer >= min_value.
Status get_int_at_least(const json& j, const char* key, int64_t min_value, int64_t* out) {
  if (!present(j, key)) return Status::ok();
  const json& v = j.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < min_value) {
    return invalid_argument(str("field '", key, "' must be an integer >= ", min_value, ", got ", v.dump()));
  }
  *out = v.get<int64_t>();
  return Status::ok();
}

// Expert e of a stacked [E, rows, cols] tensor as [rows, cols] (a view).
Tensor expert(const Tensor& stacked, int64_t e) { return stacked.select(0, e); }

// The FP8 scales of per-expert projections (load_linear's), stacked like their weights (MoeFp8Scales):
// gate_up [E, 2 * inter] or [E, 2 * inter / block_n, ceil(hidden / block_k)] (gate's grid, then
// up's), down [E, hidden] or [E, ceil(hidden / block_n), ceil(inter / block_k)].
//   gate_up: per expert gate then up; down: per expert.
StatusOr<ops::MoeFp8Scales> stack_expert_fp8_scales(const std::string& p, const std::vector<Linear>& gate_up,
                                                    const std::vector<Linear>& down, int64_t experts,
                                                    int64_t inter) {
  const ops::Fp8Scales& first = gate_up[0].fp8;
  auto check = [&](const Linear& l, const char* proj, size_t x) -> Status {
    const std::string name = str(p, ".experts.", x, ".", proj);
    if (!l.fp8.defined()) {
      return invalid_argument(str(name, ".weight is ", l.weight.describe(),
                                  " beside f8e4m3 experts; every expert "
                                  "projection of a layer must be f8e4m3 to stack them"));
    }
    if (l.fp8.input_scale.defined()) {
      return unimplemented(str(name,
                               ": static activation scales (input_scale) are not supported for MoE experts "
                               "(they take dynamic per-token scales)"));
    }
    if (l.fp8.block_n != first.block_n || l.fp8.block_k != first.block_k) {
      return invalid_argument(str(name, " and ", p,
                                  ".experts.0.gate_proj have different FP8 scale layouts; "
                                  "cannot stack them"));
    }
    return Status::ok();
  };
  std::vector<Tensor> gate_up_scales, down_scales;
  for (size_t i = 0; i < gate_up.size(); ++i) {
    RLM_RETURN_IF_ERROR(check(gate_up[i], i % 2 == 0 ? "gate_proj" : "up_proj", i / 2));
    gate_up_scales.push_back(gate_up[i].fp8.weight_scale);
  }
  for (size_t x = 0; x < down.size(); ++x) {
    RLM_RETURN_IF_ERROR(check(down[x], "down_proj", x));
    down_scales.push_back(down[x].fp8.weight_scale);
  }
  if (first.block_n > 0 && inter % first.block_n != 0) {
    return unimplemented(str(p, ".experts: moe_intermediate_size ", inter,
                             " is not a multiple of the FP8 block size ", first.block_n,
                             " (weight_block_size); the stacked gate/up projection needs whole "
                             "blocks of gate rows"));
  }
  ops::MoeFp8Scales s;
  s.gate_up.block_n = s.down.block_n = first.block_n;
  s.gate_up.block_k = s.down.block_k = first.block_k;
  auto stacked = [experts](const std::vector<Tensor>& parts) {
    Tensor t = concat_rows(parts);
    Shape shape = t.shape();
    shape[0] /= experts;
    shape.insert(shape.begin(), experts);
    return t.view(shape);
  };
  s.gate_up.weight_scale = stacked(gate_up_scales);
  s.down.weight_scale = stacked(down_scales);
  return s;
}

// Quantizes stacked float experts [E, rows, cols] to f8e4m3 per expert and output channel, as
// --quantization fp8 quantizes every Linear (quantize_linear_fp8 on the [E * rows, cols] matrix:
// one scale per row is one per expert and channel); scales [E, rows].
Status quantize_stacked_experts(Tensor& w, ops::Fp8Scales& scales, const std::string& name) {
  const int64_t e = w.size(0), rows = w.size(1), cols = w.size(2);
  Linear l;
  l.weight = w.contiguous().view({e * rows, cols});
  RLM_RETURN_IF_ERROR(quantize_linear_fp8(l, name));
  w = l.weight.view({e, rows, cols});
  scales = l.fp8;
  scales.weight_scale = scales.weight_scale.view({e, rows});
  return Status::ok();
}

}  // namespace

Status parse_moe_spec(const json& j, int64_t num_layers, MoeSpec* s, std::vector<bool>* is_moe) {
  // transformers 5.x writes Qwen3-MoE's expert count as num_local_experts (num_experts is its alias).
  RLM_RETURN_IF_ERROR(get_int_at_least(j, "num_local_experts", 0, &s->num_experts));
  RLM_RETURN_IF_ERROR(get_int_at_least(j, "num_experts", 0, &s->num_experts));
  RLM_RETURN_IF_ERROR(get_int_at_least(j, "num_experts_per_tok", 1, &s->num_experts_per_tok));
  RLM_RETURN_IF_ERROR(get_int_at_least(j, "moe_intermediate_size", 1, &s->moe_intermediate_size));
  RLM_RETURN_IF_ERROR(get_int_at_least(j, "shared_expert_intermediate_size", 0, &s->shared_expert_intermediate_size));
  if (present(j, "norm_topk_prob")) {
    if (!j.at("norm_topk_prob").is_boolean()) return invalid_argument("field 'norm_topk_prob' must be true or false");
    s->norm_topk_prob = j.at("norm_topk_prob").get<bool>();
  }
  if (s->num_experts > 0 && s->num_experts_per_tok > s->num_experts) {
    return invalid_argument(str("num_experts_per_tok (", s->num_experts_per_tok, ") exceeds num_experts (",
                                s->num_experts, ")"));
  }
  int64_t sparse_step = 1;
  RLM_RETURN_IF_ERROR(get_int_at_least(j, "decoder_sparse_step", 1, &sparse_step));
  std::set<int64_t> mlp_only;
  if (present(j, "mlp_only_layers")) {
    const json& m = j.at("mlp_only_layers");
    if (!m.is_array()) return invalid_argument("field 'mlp_only_layers' must be a list of layer indices");
    for (const json& v : m) {
      if (!v.is_number_integer()) return invalid_argument(str("field 'mlp_only_layers' has ", v.dump()));
      mlp_only.insert(v.get<int64_t>());
    }
  }
  is_moe->clear();
  for (int64_t l = 0; l < num_layers; ++l) {
    is_moe->push_back(!mlp_only.count(l) && s->num_experts > 0 && (l + 1) % sparse_step == 0);
  }
  return Status::ok();
}

StatusOr<SparseMoeBlock> load_sparse_moe(WeightSource& ws, const std::string& p, const MoeSpec& s, int64_t hidden) {
  const int64_t e = s.num_experts, inter = s.moe_intermediate_size;
  SparseMoeBlock m;
  RLM_ASSIGN_OR_RETURN(m.router, ws.get(p + ".gate.weight", {e, hidden}));
  if (m.router.dtype() == DType::kF8E4M3) {
    return unimplemented(str(p,
                             ".gate.weight (the router) is f8e4m3; the router takes float or GGUF weights "
                             "(FP8 checkpoints keep it unquantized)"));
  }
  std::vector<Tensor> gate_up, down;  // per expert: gate, up rows; down
  std::vector<Linear> gate_up_fp8, down_fp8;  // per expert, FP8 projections: gate, up; down
  if (ws.has(p + ".experts.gate_proj") && !ws.has(p + ".experts.0.gate_proj.weight")) {
    RLM_ASSIGN_OR_RETURN(Tensor g, ws.get(p + ".experts.gate_proj", {e, inter, hidden}));
    RLM_ASSIGN_OR_RETURN(Tensor u, ws.get(p + ".experts.up_proj", {e, inter, hidden}));
    RLM_ASSIGN_OR_RETURN(m.w_down, ws.get(p + ".experts.down_proj", {e, hidden, inter}));
    // GGUF experts kept in their block types: gate and up are stacked into one matrix per expert
    // when they share a type; otherwise both are dequantized to f32 (down keeps its own type).
    if (g.dtype() != u.dtype() && (is_quantized(g.dtype()) || is_quantized(u.dtype()))) {
      g = is_quantized(g.dtype()) ? dequantize(g) : g.to(DType::kF32);
      u = is_quantized(u.dtype()) ? dequantize(u) : u.to(DType::kF32);
    }
    for (int64_t x = 0; x < e; ++x) {
      gate_up.push_back(expert(g, x));
      gate_up.push_back(expert(u, x));
    }
  } else if (ws.has(p + ".experts.0.gate_proj.weight") || !ws.has(p + ".experts.gate_up_proj")) {
    // Through load_linear: f8e4m3 projections come with their scales (FP8 checkpoints) and, under
    // --quantization fp8, float ones are quantized per output channel as every Linear is.
    for (int64_t x = 0; x < e; ++x) {
      const std::string q = p + ".experts." + std::to_string(x);
      RLM_ASSIGN_OR_RETURN(Linear g, load_linear(ws, q + ".gate_proj", inter, hidden, false));
      RLM_ASSIGN_OR_RETURN(Linear u, load_linear(ws, q + ".up_proj", inter, hidden, false));
      RLM_ASSIGN_OR_RETURN(Linear d, load_linear(ws, q + ".down_proj", hidden, inter, false));
      gate_up.push_back(g.weight);
      gate_up.push_back(u.weight);
      down.push_back(d.weight);
      if (g.fp8.defined() || u.fp8.defined() || d.fp8.defined()) {
        gate_up_fp8.push_back(std::move(g));
        gate_up_fp8.push_back(std::move(u));
        down_fp8.push_back(std::move(d));
      }
    }
  } else {
    RLM_ASSIGN_OR_RETURN(m.w_gate_up, ws.get(p + ".experts.gate_up_proj", {e, 2 * inter, hidden}));
    RLM_ASSIGN_OR_RETURN(m.w_down, ws.get(p + ".experts.down_proj", {e, hidden, inter}));
  }
  // Each stacked matrix holds one dtype (gate/up and down may differ only when quantized: below).
  for (const std::vector<Tensor>* parts : {&gate_up, &down}) {
    for (const Tensor& t : *parts) {
      if (t.dtype() != (*parts)[0].dtype()) {
        return invalid_argument(str(p, ".experts: expert weights have different dtypes (",
                                    dtype_name(t.dtype()), ", ", dtype_name((*parts)[0].dtype()),
                                    "); cannot stack them"));
      }
    }
  }
  if (!gate_up.empty()) m.w_gate_up = concat_rows(gate_up).view({e, 2 * inter, hidden});
  if (!down.empty()) m.w_down = concat_rows(down).view({e, hidden, inter});
  if (!gate_up_fp8.empty()) {
    RLM_ASSIGN_OR_RETURN(m.fp8, stack_expert_fp8_scales(p, gate_up_fp8, down_fp8, e, inter));
  } else if (m.w_gate_up.dtype() == DType::kF8E4M3 || m.w_down.dtype() == DType::kF8E4M3) {
    return unimplemented(str(p,
                             ".experts: stacked f8e4m3 experts are not supported (FP8 checkpoints store them "
                             "per expert, experts.E.{gate,up,down}_proj.weight with their scales)"));
  } else if (ws.load_options.quantize_fp8) {
    // Stacked float experts (transformers 5.x parameters, dequantized GGUF experts): each expert
    // quantized per output channel, the scales [num_experts, rows].
    RLM_RETURN_IF_ERROR(quantize_stacked_experts(m.w_gate_up, m.fp8.gate_up, p + ".experts.gate_up_proj"));
    RLM_RETURN_IF_ERROR(quantize_stacked_experts(m.w_down, m.fp8.down, p + ".experts.down_proj"));
  }
  if (m.fp8.defined() && ws.load_options.tp.active()) {
    return unimplemented(
        str(p, ".experts: tensor parallelism does not shard FP8 experts yet (run with --tp 1)"));
  }
  const bool quantized = is_quantized(m.w_gate_up.dtype()) || is_quantized(m.w_down.dtype());
  if (!quantized && m.w_gate_up.dtype() != m.w_down.dtype()) {
    return invalid_argument(str(p, ".experts: gate/up and down projections have different dtypes (",
                                dtype_name(m.w_gate_up.dtype()), ", ", dtype_name(m.w_down.dtype()), ")"));
  }
  for (const Tensor* t : {&m.w_gate_up, &m.w_down}) {
    if (!is_floating(t->dtype()) && !is_quantized(t->dtype()) && t->dtype() != DType::kF8E4M3) {
      return unimplemented(
          str(p, ".experts are ", dtype_name(t->dtype()),
              "; the MoE experts take f32/bf16/f16, f8e4m3 or GGUF block-quantized weights"));
    }
  }
  m.w_gate_up = m.w_gate_up.contiguous();
  m.w_down = m.w_down.contiguous();
  const int64_t shared = s.shared_expert_intermediate_size;
  if (shared > 0) {
    RLM_ASSIGN_OR_RETURN(m.shared_gate_up,
                         load_fused_linear(ws, {p + ".shared_expert.gate_proj", p + ".shared_expert.up_proj"},
                                           {shared, shared}, hidden, false));
    RLM_ASSIGN_OR_RETURN(m.shared_down, load_linear(ws, p + ".shared_expert.down_proj", hidden, shared, false));
    RLM_ASSIGN_OR_RETURN(m.shared_expert_gate, ws.get(p + ".shared_expert_gate.weight", {1, hidden}));
  }
  return m;
}

void sparse_moe_forward(const SparseMoeBlock& m, const MoeSpec& s, const Tensor& x, const Tensor& out) {
  const int64_t n = x.size(0), top_k = s.num_experts_per_tok, hidden = x.size(1);
  const Device dev = x.device();
  Tensor router_logits = Tensor::empty({n, s.num_experts}, DType::kF32, dev);  // [num_tokens, num_experts]
  ops::linear(x, m.router, std::nullopt, router_logits);
  Tensor topk_weights = Tensor::empty({n, top_k}, DType::kF32, dev);  // [num_tokens, top_k]
  Tensor topk_ids = Tensor::empty({n, top_k}, DType::kI32, dev);      // [num_tokens, top_k]
  ops::moe_topk_softmax(router_logits, s.norm_topk_prob, topk_weights, topk_ids);
  ops::moe_experts(x, m.w_gate_up, m.w_down, topk_weights, topk_ids, out, m.fp8);
  if (!m.shared_expert_gate.defined()) return;
  const int64_t inter = m.shared_gate_up.out_features() / 2;  // this rank's share under tensor parallelism
  Tensor gate_up = Tensor::empty({n, 2 * inter}, DType::kF32, dev);  // [num_tokens, 2 * shared_inter]
  Tensor act = Tensor::empty({n, inter}, DType::kF32, dev);          // [num_tokens, shared_inter]
  Tensor shared = Tensor::empty({n, hidden}, DType::kF32, dev);      // [num_tokens, hidden]
  apply_linear(m.shared_gate_up, x, gate_up);
  ops::silu_and_mul(gate_up, act);
  apply_linear(m.shared_down, act, shared);
  Tensor gate = Tensor::empty({n, 1}, DType::kF32, dev);  // [num_tokens, 1]
  ops::linear(x, m.shared_expert_gate, std::nullopt, gate);
  ops::sigmoid_gate_add(shared, gate, out);
}

void move_sparse_moe(SparseMoeBlock& m, Device device) {
  // Block-quantized experts (GGUF) move in their blocks, as move_linear moves quantized matrices:
  // the CUDA experts multiply every block type through cuda::quant_linear, like ops::linear.
  for (Tensor* t : {&m.router, &m.w_gate_up, &m.w_down, &m.shared_expert_gate, &m.fp8.gate_up.weight_scale,
                    &m.fp8.down.weight_scale}) {
    if (t->defined()) *t = t->contiguous().to(device);
  }
  move_linear(m.shared_gate_up, device);
  move_linear(m.shared_down, device);
}

}  // namespace rlm
