// ModelRunner: owns the model, its KV pool, the request->token table and the attention backend,
// and runs one step (metadata, forward) for a ForwardBatch; the Sampler (engine/sampler.h) turns
// its logits into tokens.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/attention_backend.h"
#include "attention/forward_batch.h"
#include "cache/kv_pool.h"
#include "cache/mamba_pool.h"
#include "engine/memory_plan.h"
#include "model/causal_lm.h"
#include "ops/ops.h"

namespace rlm {

class StepSender;
class TpGroup;

struct ModelRunnerConfig {
  std::string attention_backend = "cpu";
  std::string prefill_attention_backend;  // "": attention_backend; differing names give `hybrid`
  std::string decode_attention_backend;   // "": attention_backend
  int64_t page_size = 1;
  int64_t num_pages = 0;        // KV capacity in pages; 0: enough for max_requests * max_context_len
  int64_t max_requests = 64;    // rows of req_to_token
  int64_t max_context_len = 0;  // 0: the model's max_position_embeddings
  DType kv_dtype = DType::kF32;
  Device device = Device::cpu();  // where weights, KV cache and activations live
  int64_t mamba_slots = 0;  // hybrid models: MambaPool slots; 0: 3 * max_requests (working, tracking, cached)
  // CUDA only, used when num_pages == 0: the KV pool takes what is left of total * fraction after
  // the weights, the largest step (max_num_tokens new tokens, max_requests requests) and the CUDA
  // graphs, measured by a profile run at start-up (engine/memory_plan.h; SGLang's
  // --mem-fraction-static, vLLM's profile run); 0: size from max_requests instead.
  double mem_fraction_static = 0.0;
  int64_t max_num_tokens = 8192;  // most new tokens of one step (the scheduler's --max-prefill-tokens)
  // CUDA only: capture decode CUDA graphs for batch sizes up to min(cuda_graph_max_bs, max_requests)
  // at start-up (pure-attention models with a graph-capable backend; hybrid models run eagerly).
  // A failed capture is reported on stderr and the runner decodes eagerly.
  bool cuda_graph = false;
  int64_t cuda_graph_max_bs = 160;
  // CUDA only: programmatic dependent launch of the decode kernels (kernels/cuda/pdl.h); a
  // process-wide switch, set when the runner is made.
  bool pdl = true;
  // Cascade attention for extend steps (attention/cascade_plan.h): auto / on / off.
  CascadeMode cascade_attention = CascadeMode::kAuto;
  // Tensor parallelism (dist/tp_group.h): the group this runner's model is a shard of; null at
  // --tp 1. Rank 0's runner sends every state-changing call to the other ranks' runners; every
  // rank's KV pool holds its own KV heads, with the same number of pages on every rank.
  std::shared_ptr<TpGroup> tp_group;
};

class CudaGraphRunner;

// KV pages for `fraction` of a device of `total_bytes` of which `used_bytes` are taken now (weights,
// CUDA context), at `bytes_per_page` per page, keeping `reserve_bytes` for allocator rounding:
// floor((total * fraction - used - reserve) / bytes_per_page), or 0 when that is not positive.
int64_t kv_pages_for_memory(size_t total_bytes, size_t used_bytes, double fraction, size_t bytes_per_page,
                            size_t reserve_bytes);

// "auto" (CUDA when a GPU is visible, else the CPU), "cpu", "cuda", "cuda:N".
StatusOr<Device> resolve_device(const std::string& text);
// The attention backend for a device when none is named: "native" on CUDA, "cpu" on the CPU.
std::string default_attention_backend(Device device);

class ModelRunner {
 public:
  static StatusOr<std::unique_ptr<ModelRunner>> create(std::unique_ptr<CausalLM> model,
                                                       const ModelRunnerConfig& config);

  const ModelConfig& model_config() const { return model_->config(); }
  const ModelRunnerConfig& config() const { return config_; }
  KVPool& kv_pool() { return *kv_pool_; }
  ReqToTokenPool& req_to_token() { return *req_to_token_; }
  // nullptr for pure-attention models.
  MambaPool* mamba_pool() { return mamba_pool_.get(); }
  AttentionBackend& attention_backend() { return *backend_; }

  // Builds the ForwardBatch for `entries` (writing their slots into req_to_token). Token ids,
  // positions and KV slots are validated here on the host (one upload for all index tensors), so
  // the device never needs a synchronising check of them.
  ForwardBatch build_batch(ForwardMode mode, const std::vector<BatchEntry>& entries);
  // Runs the model; returns f32 logits [num_outputs, vocab] (rows in batch.logits_indices order).
  // On CUDA it never waits for the device: a decode batch that fits a captured size replays a CUDA
  // graph, anything else runs eagerly; device-side index checks are deferred: the next forward()
  // (once the caller has read this step's results) or synchronize() reports them.
  Tensor forward(ForwardBatch& batch);
  // Waits for the device and throws rlm::Error if a deferred index check failed since the last
  // forward() or synchronize() looked.
  void synchronize();

  ~ModelRunner();
  // The captured decode batch sizes (empty when CUDA graphs are off).
  std::vector<int64_t> cuda_graph_batch_sizes() const;
  // nullptr when CUDA graphs are off.
  const CudaGraphRunner* cuda_graph_runner() const { return graph_runner_.get(); }
  // How the KV pool was sized from GPU memory (nullopt when it was not: the CPU, or a given size).
  const std::optional<MemoryPlan>& memory_plan() const { return memory_plan_; }
  // Turns replays off (eager decode) or back on, e.g. to compare both on the same state; no-op
  // without captured graphs.
  void set_use_cuda_graph(bool on) { use_cuda_graph_ = on; }
  // Remembers, per request slot of `batch`, the token sampled for it (tokens: i32 [batch_size] on
  // the model's device), so that a later decode entry can name it with kFutureToken.
  void record_sampled_tokens(const Tensor& tokens, const ForwardBatch& batch);
  // The same for a step where only some entries sampled: req_slots[i] is row i's request slot.
  void record_sampled_tokens(const Tensor& tokens, const std::vector<int32_t>& req_slots);
  // The table record_sampled_tokens writes: i32 [max_requests] on the model's device, the last
  // token sampled per request slot (read by the device-side penalties of a step launched ahead).
  const Tensor& future_tokens() const { return future_tokens_; }

 private:
  ModelRunner() = default;
  std::unique_ptr<KVPool> make_kv_pool(const KVShape& kv, int64_t num_pages) const;
  size_t kv_bytes_per_page(const KVShape& kv) const;
  static size_t kv_reserve_bytes(const KVShape& kv);
  // Sizing from memory: one request of the context length must fit beside the weights.
  Status check_context_fits(const KVShape& kv) const;
  // The profile run: the steps of profile_steps() on a temporary KV pool, then the CUDA graphs;
  // sets config_.num_pages and memory_plan_.
  Status plan_memory(const KVShape& kv);
  void run_profile_step(const ProfileStep& step);
  // Captures decode CUDA graphs when configured and possible (a failure is reported on stderr and
  // leaves graph_runner_ null: decode runs eagerly).
  void capture_cuda_graphs();
  // Tensor parallelism: every rank takes the smallest KV page count any rank planned.
  void agree_on_num_pages();
  Tensor forward_local(ForwardBatch& batch);
  // Rank 0: the tokens sampled for req_slots, to the other ranks' future-token tables.
  void send_sampled_tokens(const Tensor& tokens, const std::vector<int32_t>& req_slots);

  ModelRunnerConfig config_;
  std::unique_ptr<CausalLM> model_;
  std::unique_ptr<KVPool> kv_pool_;
  std::unique_ptr<ReqToTokenPool> req_to_token_;
  std::unique_ptr<MambaPool> mamba_pool_;
  Tensor future_tokens_;  // i32 [max_requests] on the device: last token sampled per request slot
  std::unique_ptr<AttentionBackend> backend_;
  StepSender* step_sender_ = nullptr;  // rank 0 of a tensor-parallel group: the other ranks' step stream
  bool use_cuda_graph_ = true;
  std::optional<MemoryPlan> memory_plan_;
  std::unique_ptr<CudaGraphRunner> graph_runner_;  // last: destroyed first (its graphs use the rest)
};

}  // namespace rlm
