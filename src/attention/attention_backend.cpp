#include "attention/attention_backend.h"

#include <map>

#include "attention/cpu_backend.h"
#include "attention/paged_backend.h"

namespace rlm {

ops::AttentionParams pool_attention_params(const AttentionLayer& layer, const KVPool& pool) {
  ops::AttentionParams p = layer.params;
  const KvScales& s = pool.scales(layer.layer_id);
  p.k_scale = s.k;
  p.v_scale = s.v;
  return p;
}

Tensor AttentionBackend::forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const QkPrologue& prologue, const AttentionLayer& layer,
                                        const ForwardBatch& batch) {
  RLM_CHECK((prologue.q_norm == nullptr) == (prologue.k_norm == nullptr))
      << "q_norm and k_norm come together";
  if (prologue.q_norm != nullptr) {
    ops::rms_norm(q, *prologue.q_norm, prologue.norm_eps, q);
    ops::rms_norm(k, *prologue.k_norm, prologue.norm_eps, k);
  }
  ops::rotary_embedding(q, k, *prologue.positions, *prologue.cos_sin, prologue.is_neox);
  return forward(q, k, v, layer, batch);
}

Tensor AttentionBackend::forward_linear(const LinearAttentionLayer&, const Tensor&, const Tensor&, const Tensor&,
                                        const ForwardBatch&) {
  fail(str("linear-attention (Gated DeltaNet) layers need the hybrid_linear attention backend, got '", name(), "'"));
}

namespace {
// Built-in backends are listed here (not by static initialisers in their own files, which a
// static library would drop); others may be added with register_attention_backend.
std::map<std::string, AttentionBackendFactory>& registry() {
  static std::map<std::string, AttentionBackendFactory> r = {
      {"cpu", [] { return std::make_unique<CpuAttentionBackend>(); }},
#ifdef RADIXLM_WITH_CUDA
      {"native", [] { return std::make_unique<PagedAttentionBackend>("native", DeviceType::kCUDA); }},
#endif
  };
  return r;
}
}  // namespace

bool register_attention_backend(const std::string& name, AttentionBackendFactory factory) {
  registry()[name] = std::move(factory);
  return true;
}

StatusOr<std::unique_ptr<AttentionBackend>> create_attention_backend(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [n, f] : registry()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument(str("unknown attention backend '", name, "' (available: ", known, ")"));
  }
  return it->second();
}

std::vector<std::string> attention_backend_names() {
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

}  // namespace rlm
