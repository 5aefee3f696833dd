// StepExecutor: what the scheduler needs from the engine — run one step (forward + sample) and
// expose the request->token table and KV capacity. ModelStepExecutor adapts a ModelRunner; the
// scheduler tests use a fake model with the same interface.
#pragma once

#include <memory>
#include <vector>

#include "cache/kv_pool.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "scheduler/request.h"

namespace rlm {

struct StepItem {
  BatchEntry entry;     // slots and ids of this request's new tokens
  bool sample = true;   // false for a prefill chunk that is not the last one
  bool decode = false;  // a running request's next token (else a prompt chunk)
  const Req* req = nullptr;  // sampling parameters, seed and history
  // Tokens already sampled for this request by launched steps whose results the scheduler has not
  // read yet (overlap scheduling): the sampler's step index is output_ids.size() + this.
  int32_t pending_outputs = 0;
  // A prompt chunk of a prompt_logprobs request: the step also returns the logprobs (with this
  // many top alternatives) of the prompt tokens its positions predict; -1: none.
  int32_t prompt_logprobs = -1;
};

// What a step computed for one item with prompt_logprobs >= 0: the logprobs of prompt tokens
// first_pos, first_pos + 1, ... (each given the tokens before it).
struct PromptLogprobs {
  size_t item = 0;  // index in the step's items
  int64_t first_pos = 0;
  std::vector<TokenLogprob> tokens;
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
  // Runs one step; returns one result per item with sample == true, in item order. A step is
  // kDecode (every item one token) or kExtend (prompt chunks, and in a mixed step also decode
  // items, which come first). An item that does not sample needs no logits.
  virtual std::vector<SampleResult> run(ForwardMode mode, const std::vector<StepItem>& items) = 0;

  // Overlap scheduling. launch() starts a step (any mode) and returns without waiting for it; a
  // decode item's new_ids[0] may be kFutureToken: the token the previously launched step sampled
  // for the same request slot (read in device memory, never seen by the host; a request's
  // penalties count it as an output token there too). Items with a future token come first.
  // Penalties and logprobs are computed on the device like everything else. wait() returns the
  // results, one per item with sample == true, in item order. An executor that cannot overlap
  // returns false here.
  //
  // Grammar-constrained requests (Req::grammar): the allowed-token mask of such a row needs the
  // token the previous step sampled for it, which the host sees only once that step is processed.
  // launch() then queues the forward alone, and finish_launch() — called by the scheduler after it
  // has processed the step before (the matchers have accepted every earlier token) and before the
  // next launch() — fills the masks on the host while the device runs the forward, then queues the
  // masked sampling. Without constrained rows launch() queues the sampling too and finish_launch()
  // does nothing.
  virtual bool supports_overlap() const { return false; }
  virtual std::unique_ptr<LaunchedStep> launch(ForwardMode mode, const std::vector<StepItem>& items);
  virtual void finish_launch(LaunchedStep& step) {}
  virtual std::vector<SampleResult> wait(LaunchedStep& step);

  // Prompt logprobs (StepItem::prompt_logprobs): after run(), or wait() of a launched step, the
  // ones that step computed, in item order; each call hands them out once. An executor that
  // cannot compute them returns false from supports_prompt_logprobs() (the scheduler then refuses
  // such requests).
  virtual bool supports_prompt_logprobs() const { return false; }
  virtual std::vector<PromptLogprobs> take_prompt_logprobs() { return {}; }
};

// Runs steps on a ModelRunner and samples them with the engine's Sampler (engine/sampler.h):
// logprobs, penalties (over the request's prompt and output tokens, plus a token still in flight
// through the runner's future-token table) and sampling happen on the model's device; only the
// tokens and the small logprob arrays come back to the host.
class ModelStepExecutor : public StepExecutor {
 public:
  explicit ModelStepExecutor(ModelRunner& runner) : runner_(runner), sampler_(runner.future_tokens()) {}
  ReqToTokenPool& req_to_token() override { return runner_.req_to_token(); }
  int64_t num_pages() const override { return runner_.kv_pool().config().num_pages; }
  int64_t page_size() const override { return runner_.kv_pool().page_size(); }
  int64_t vocab_size() const override { return runner_.model_config().vocab_size; }
  std::vector<int64_t> eos_token_ids() const override { return runner_.model_config().eos_token_ids; }
  MambaPool* mamba_pool() override { return runner_.mamba_pool(); }
  std::vector<SampleResult> run(ForwardMode mode, const std::vector<StepItem>& items) override;
  bool supports_overlap() const override { return true; }
  std::unique_ptr<LaunchedStep> launch(ForwardMode mode, const std::vector<StepItem>& items) override;
  void finish_launch(LaunchedStep& step) override;
  std::vector<SampleResult> wait(LaunchedStep& step) override;
  bool supports_prompt_logprobs() const override { return true; }
  std::vector<PromptLogprobs> take_prompt_logprobs() override { return std::move(prompt_logprobs_); }

 private:
  ModelRunner& runner_;
  Sampler sampler_;
  std::vector<PromptLogprobs> prompt_logprobs_;  // of the last step run() or wait() read
};

}  // namespace rlm
