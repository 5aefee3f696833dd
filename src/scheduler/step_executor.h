// StepExecutor: what the scheduler needs from the engine — run one step (forward + sample) and
// expose the request->token table and KV capacity. ModelStepExecutor adapts a ModelRunner; the
// scheduler tests use a fake model with the same interface.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "cache/kv_pool.h"
#include "engine/model_runner.h"
#include "scheduler/request.h"

namespace rlm {

struct StepItem {
  BatchEntry entry;     // slots and ids of this request's new tokens
  bool sample = true;   // false for a prefill chunk that is not the last one
  const Req* req = nullptr;  // sampling parameters, seed and history
  // Tokens already sampled for this request by launched steps whose results the scheduler has not
  // read yet (overlap scheduling): the sampler's step index is output_ids.size() + this.
  int32_t pending_outputs = 0;
};

struct SampleResult {
  int32_t token = 0;
  std::optional<TokenLogprob> logprob;  // when req->params.logprobs >= 0
};

// A step launched on the device whose sampled tokens are read later (overlap scheduling).
class LaunchedStep {
 public:
  virtual ~LaunchedStep() = default;
};

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  virtual ReqToTokenPool& req_to_token() = 0;
  virtual int64_t num_pages() const = 0;
  virtual int64_t page_size() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int64_t> eos_token_ids() const = 0;
  // Hybrid linear-attention models: the pool of recurrent-state slots (working states and the
  // prefix cache's snapshots; see ForwardBatch for what a step reads and writes). nullptr otherwise.
  virtual MambaPool* mamba_pool() { return nullptr; }
  // Runs one step; returns one result per item with sample == true, in item order.
  virtual std::vector<SampleResult> run(ForwardMode mode, const std::vector<StepItem>& items) = 0;

  // Overlap scheduling. launch() starts a decode step and returns without waiting for it; an
  // entry's new_ids[0] may be kFutureToken: the token the previously launched step sampled for
  // the same request slot (read in device memory, never seen by the host). Items must all sample
  // and ask for no logprobs or penalties (those need the logits on the host). wait() returns the
  // results, one per item, in item order. An executor that cannot overlap returns false here.
  virtual bool supports_overlap() const { return false; }
  virtual std::unique_ptr<LaunchedStep> launch(ForwardMode mode, const std::vector<StepItem>& items);
  virtual std::vector<SampleResult> wait(LaunchedStep& step);
};

// True when a request's tokens can be sampled on the device without its logits on the host
// (no logprobs, no repetition/frequency/presence penalties).
bool device_sampling_ok(const SamplingParams& params);

class ModelStepExecutor : public StepExecutor {
 public:
  explicit ModelStepExecutor(ModelRunner& runner) : runner_(runner) {}
  ReqToTokenPool& req_to_token() override { return runner_.req_to_token(); }
  int64_t num_pages() const override { return runner_.kv_pool().config().num_pages; }
  int64_t page_size() const override { return runner_.kv_pool().page_size(); }
  int64_t vocab_size() const override { return runner_.model_config().vocab_size; }
  std::vector<int64_t> eos_token_ids() const override { return runner_.model_config().eos_token_ids; }
  MambaPool* mamba_pool() override { return runner_.mamba_pool(); }
  std::vector<SampleResult> run(ForwardMode mode, const std::vector<StepItem>& items) override;
  bool supports_overlap() const override { return true; }
  std::unique_ptr<LaunchedStep> launch(ForwardMode mode, const std::vector<StepItem>& items) override;
  std::vector<SampleResult> wait(LaunchedStep& step) override;

 private:
  ModelRunner& runner_;
};

// Applies repetition (HF semantics, over prompt and output tokens), frequency and presence
// penalties (over output tokens) to one row of logits in place.   logits: [vocab]
void apply_penalties(float* logits, int64_t vocab, const SamplingParams& params, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output);

}  // namespace rlm
