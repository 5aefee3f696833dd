// Per-request sampling and stopping parameters (OpenAI / SGLang semantics), validated once at
// admission so the scheduler never sees an out-of-range value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace rlm {

namespace grammar {
class CompiledGrammar;
}

struct SamplingParams {
  float temperature = 1.0f;       // 0: greedy
  float top_p = 1.0f;             // (0, 1]
  int32_t top_k = -1;             // -1 or 0: off
  float min_p = 0.0f;             // [0, 1]
  float repetition_penalty = 1.0f;  // (0, 2]; > 1 discourages tokens seen in prompt or output
  float frequency_penalty = 0.0f;   // [-2, 2]; subtracts penalty * count(token in output)
  float presence_penalty = 0.0f;    // [-2, 2]; subtracts penalty if token in output
  std::optional<uint64_t> seed;     // same seed + same request => same output
  int64_t max_new_tokens = 16;      // >= 1 (0 allowed only for prompt-logprob style requests: no)
  int64_t min_new_tokens = 0;       // EOS/stop ids are ignored before this many tokens
  std::vector<std::string> stop;    // stop strings: never part of the returned text
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  int32_t logprobs = -1;  // -1: none; 0: logprob of the chosen token; k > 0: also the top k
  // Logprobs of the prompt's tokens 1.. (each given the tokens before it), with the top k
  // alternatives; -1: none. Computed in the prefill, which then does not reuse the prefix cache.
  int32_t prompt_logprobs = -1;
  // OpenAI logit_bias: (token id, value in [-100, 100]) added to the logit after the penalties;
  // ids distinct.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Grammar-constrained decoding (grammar/grammar.h): every token is one the grammar allows, and
  // the request finishes when the grammar is complete and a stop token is sampled (the only tokens
  // allowed then), whatever ignore_eos and min_new_tokens say. Null: unconstrained. Shared by the
  // n > 1 sequences of a request; each gets its own matcher.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  // Checks ranges; errors name the parameter (mapped to HTTP 400 by the server).
  Status validate(int64_t vocab_size) const;
};

}  // namespace rlm
