// Parsing and validation of OpenAI / SGLang request bodies into what the engine needs. Every
// type, range and unknown-field problem becomes an ApiError (HTTP 400) naming the field.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/sampling_params.h"
#include "server/api_error.h"

namespace rlm {

using ojson = nlohmann::ordered_json;

enum class ApiKind { kCompletion, kChat, kGenerate };

struct PromptInput {
  std::optional<std::string> text;  // text prompt, or
  std::vector<int32_t> ids;         // token ids (when text is empty)
};

struct ParsedRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;               // "" when not given (/generate)
  std::vector<PromptInput> prompts;  // completions/generate; chat fills it after rendering
  ojson messages;                  // chat
  ojson tools;                     // chat: null or array
  ojson chat_template_kwargs;      // chat: null or object (e.g. enable_thinking)
  bool add_generation_prompt = true;
  SamplingParams params;
  bool max_tokens_given = false;   // chat default: the rest of the context
  bool add_special_tokens = true;  // completions: add BOS etc. to text prompts
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool echo = false;
  bool chat_logprobs = false;      // chat: logprobs=true (top_logprobs in params.logprobs)
  std::string rid;                 // /generate: client-chosen request id
};

// Each returns the parsed request, or sets *err and returns nullopt.
std::optional<ParsedRequest> parse_completion_request(const ojson& body, ApiError* err);
std::optional<ParsedRequest> parse_chat_request(const ojson& body, ApiError* err);
std::optional<ParsedRequest> parse_generate_request(const ojson& body, ApiError* err);

}  // namespace rlm
