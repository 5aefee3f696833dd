#include "scheduler/sampling_params.h"

#include <cmath>

#include "grammar/grammar.h"

namespace rlm {

Status SamplingParams::validate(int64_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f) {
    return invalid_argument(str("temperature must be in [0, 100], got ", temperature));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument(str("top_p must be in (0, 1], got ", top_p));
  if (top_k < -1) return invalid_argument(str("top_k must be -1 (off) or positive, got ", top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument(str("min_p must be in [0, 1], got ", min_p));
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 2.0f)) {
    return invalid_argument(str("repetition_penalty must be in (0, 2], got ", repetition_penalty));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return invalid_argument(str("frequency_penalty must be in [-2, 2], got ", frequency_penalty));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return invalid_argument(str("presence_penalty must be in [-2, 2], got ", presence_penalty));
  }
  if (max_new_tokens < 1) return invalid_argument(str("max_tokens must be at least 1, got ", max_new_tokens));
  if (min_new_tokens < 0 || min_new_tokens > max_new_tokens) {
    return invalid_argument(str("min_tokens must be in [0, max_tokens], got ", min_new_tokens));
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  }
  if (stop.size() > 16) return invalid_argument(str("at most 16 stop strings are allowed, got ", stop.size()));
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument(str("stop_token_ids entry ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto [id, value] = logit_bias[i];
    if (id < 0 || id >= vocab_size) {
      return invalid_argument(str("logit_bias token ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!(value >= -100.0f && value <= 100.0f)) {
      return invalid_argument(str("logit_bias value ", value, " of token ", id, " must be in [-100, 100]"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (logit_bias[j].first == id) return invalid_argument(str("logit_bias lists token ", id, " twice"));
    }
  }
  if (grammar != nullptr && grammar::grammar_vocab_size(*grammar) != vocab_size) {
    return invalid_argument(str("the grammar was compiled for a vocabulary of ", grammar::grammar_vocab_size(*grammar),
                                " tokens, the model has ", vocab_size));
  }
  if (logprobs < -1 || logprobs > 20) return invalid_argument(str("logprobs must be in [0, 20], got ", logprobs));
  if (prompt_logprobs < -1 || prompt_logprobs > 20) {
    return invalid_argument(str("prompt_logprobs must be in [0, 20], got ", prompt_logprobs));
  }
  return Status::ok();
}

}  // namespace rlm
