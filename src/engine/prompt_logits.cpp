#include "engine/prompt_logits.h"

namespace rlm {

StatusOr<Tensor> prompt_logits(ModelRunner& runner, const std::vector<int32_t>& prompt_ids) {
  const int64_t vocab = runner.model_config().vocab_size;
  const int64_t len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_ids.empty()) return invalid_argument("the prompt is empty");
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument(str("prompt token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (len > runner.req_to_token().max_context_len()) {
    return invalid_argument(str("the prompt (", len, " tokens) exceeds the context length ",
                                runner.req_to_token().max_context_len()));
  }
  if (len > runner.kv_pool().num_slots()) {
    return invalid_argument(str("the prompt (", len, " tokens) exceeds the KV pool (", runner.kv_pool().num_slots(),
                                " tokens)"));
  }
  BatchEntry e;
  e.req_slot = runner.req_to_token().alloc();
  if (e.req_slot < 0) return Status(StatusCode::kResourceExhausted, "no free request slot");
  MambaPool* pool = runner.mamba_pool();
  if (pool != nullptr) {
    e.mamba_slot = pool->alloc();
    if (e.mamba_slot < 0) {
      runner.req_to_token().free(e.req_slot);
      return Status(StatusCode::kResourceExhausted, "no free recurrent-state slot");
    }
  }
  e.new_ids = prompt_ids;
  e.all_logits = true;
  for (int32_t pos = 0; pos < static_cast<int32_t>(len); ++pos) e.new_slots.push_back(pos);
  ForwardBatch batch = runner.build_batch(ForwardMode::kExtend, {e});
  Tensor logits = runner.forward(batch);
  runner.synchronize();  // reports a device-side check of this step before the slots go back
  runner.req_to_token().free(e.req_slot);
  if (pool != nullptr) pool->free(e.mamba_slot);
  return logits;
}

}  // namespace rlm
