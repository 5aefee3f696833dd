// Full-prompt logits for the parity tests: one extend step over a prompt that returns the logits of
// every position (not only the last), straight on a ModelRunner. Not a path from prompt to token:
// generation goes through the scheduler (server/offline_engine.h).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_runner.h"

namespace rlm {

// f32 logits [prompt_len, vocab] for every prompt position. Uses KV slots [0, prompt_len) of the
// runner's pool, a request slot and (hybrid models) a recurrent-state slot, all returned before it
// does. Precondition: nothing else uses the runner's KV pool (no scheduler over it).
// kInvalidArgument for an empty prompt, ids outside the vocabulary, or a prompt longer than the
// context length or the pool; kResourceExhausted when no request (or state) slot is free.
StatusOr<Tensor> prompt_logits(ModelRunner& runner, const std::vector<int32_t>& prompt_ids);

}  // namespace rlm
