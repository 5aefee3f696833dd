// Paged attention backends built on ops::store_kv_cache + ops::paged_attention with page-granular
// CSR metadata (kv_indptr/kv_indices). `cpu` plans on the host from the req_to_token table and runs
// the CPU kernels. `native` (registered only when CUDA is compiled in) builds kv_indptr/kv_indices
// on the GPU from the device mirror of req_to_token (cuda::build_kv_indices), takes the plan (max
// lengths, decode or not, split count) from the batch's *_cpu vectors, and so never synchronises
// with the host; in CUDA-graph mode it uses fixed-capacity buffers and a batch-size-only plan. A
// mixed step (one-token decode entries first, then prompt chunks) runs the split-KV decode kernel
// on its decode entries and the prefill kernel on the rest.
// Extend steps may run as cascade attention (attention/cascade_plan.h, `--cascade-attention`):
// a level-1 pass over shared/cached prefixes and a level-2 pass over the rest, merged by LSE.
#pragma once

#include "attention/attention_backend.h"
#include "attention/cascade_plan.h"

namespace rlm {

class PagedAttentionBackend : public AttentionBackend {
 public:
  // `device_type`: the device the KV pool must live on.
  PagedAttentionBackend(std::string name, DeviceType device_type)
      : name_(std::move(name)), device_type_(device_type) {}
  std::string name() const override { return name_; }
  void init_forward_metadata(const ForwardBatch& batch) override;
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionLayer& layer,
                 const ForwardBatch& batch) override;
  // On CUDA the rotation and the KV store are one kernel (ops::rotary_store_kv_cache) unless
  // RADIXLM_FUSED_ROPE_STORE=0 is in the environment (the two kernels: the reference for its speed).
  Tensor forward_rotary(const Tensor& q, const Tensor& k, const Tensor& v, const QkPrologue& prologue,
                        const AttentionLayer& layer, const ForwardBatch& batch) override;

  bool supports_cuda_graph() const override { return device_type_ == DeviceType::kCUDA; }
  void init_cuda_graph_state(int64_t max_bs, int64_t max_context_len) override;
  void set_cuda_graph_mode(bool on) override;
  void set_cascade_mode(CascadeMode mode) override { cascade_mode_ = mode; }
  // The current step's cascade plan (enabled == false: single pass).
  const CascadePlan& cascade_plan() const { return cascade_; }
  CascadeStats cascade_stats() const override { return stats_; }

 private:
  void init_host_metadata(const ForwardBatch& batch);
  void init_device_metadata(const ForwardBatch& batch);
  // Plans cascade attention for an extend step and puts its index arrays on `device`.
  void plan_cascade(const ForwardBatch& batch, const std::vector<int32_t>& kv_indptr, Device device);
  // CUDA, an extend step without cascade: when it starts with one-token (decode) entries and has
  // longer ones after them (a mixed step), plans the two parts separately (num_decode_ > 0).
  void plan_mixed(const ForwardBatch& batch, int64_t max_context_len);
  // Attention of q over the pool (the new keys and values stored already).
  Tensor attend(const Tensor& q, const AttentionLayer& layer, const ForwardBatch& batch);
  Tensor forward_cascade(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const AttentionLayer& layer,
                         const ForwardBatch& batch);

  std::string name_;
  DeviceType device_type_;
  Tensor kv_indptr_;   // i32 [batch_size + 1]  pages of each request (on the KV pool's device)
  Tensor kv_indices_;  // i32 [>= total_pages]
  ops::PagedAttentionPlan plan_;
  bool have_plan_ = false;  // CUDA: plan_ applies (the CPU path validates instead)
  // CUDA mixed steps: entries [0, num_decode_) run the decode kernel with decode_plan_, the rest the
  // prefill kernel with plan_. 0: one pass.
  int64_t num_decode_ = 0;
  ops::PagedAttentionPlan decode_plan_;

  CascadeMode cascade_mode_ = CascadeMode::kAuto;
  CascadePlan cascade_;
  CascadeStats stats_;
  ops::PagedAttentionPlan l1_plan_;
  // Level-1 batch (cascade_.num_entries requests) and level-2 key ranges, on the pool's device.
  Tensor l1_qo_indptr_, l1_kv_indptr_, l1_seq_lens_, l1_kv_begin_, l1_kv_end_;
  Tensor l2_kv_begin_, l2_kv_end_;

  // CUDA-graph state: fixed buffers sliced per captured batch size.
  bool graph_mode_ = false;
  int64_t graph_max_bs_ = 0;
  int64_t graph_max_context_len_ = 0;
  Tensor graph_kv_indptr_;   // i32 [graph_max_bs + 1]
  Tensor graph_kv_indices_;  // i32 [graph_max_bs * ceil(graph_max_context_len / page_size)]
};

}  // namespace rlm
