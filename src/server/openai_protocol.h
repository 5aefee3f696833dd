// Parsing and validation of OpenAI / SGLang request bodies into what the engine needs. Every
// type and range problem of a known field becomes an ApiError (HTTP 400) naming the field; unknown
// top-level fields are ignored (as vLLM and SGLang do) and listed in ParsedRequest::ignored_fields.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar.h"
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
  std::string model;               // "" when not given: the served model
  std::vector<PromptInput> prompts;  // completions/generate; chat fills it after rendering
  ojson messages;                  // chat
  ojson tools;                     // chat: null or array
  // chat: "auto", "none" (tools hidden, no tool-call parsing), "required" (at least one call) or
  // "function" (a call of tool_choice_function); the last two by constrained decoding.
  std::string tool_choice = "auto";
  std::string tool_choice_function;
  // The output constraint (response_format json_object / json_schema, regex, ebnf, vLLM's guided_*
  // and structured_outputs, /generate's sampling_params json_schema / regex / ebnf) and the field
  // that gave it; compiled against the vocabulary before submission (grammar/grammar.h).
  grammar::GrammarSpec grammar;
  std::string grammar_field;
  ojson chat_template_kwargs;      // chat: null or object (e.g. enable_thinking)
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // chat: the last (assistant) message stays open for the model to continue
  SamplingParams params;
  bool max_tokens_given = false;   // chat default: the rest of the context
  bool add_special_tokens = true;  // completions: add BOS etc. to text prompts
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool echo = false;
  int32_t prompt_logprobs = -1;    // vLLM's prompt_logprobs field (-1: not asked); echo + logprobs also set params'
  bool chat_logprobs = false;      // chat: logprobs=true (top_logprobs in params.logprobs)
  std::string rid;                 // /generate: client-chosen request id
  std::vector<std::string> ignored_fields;  // unknown top-level fields, ignored
};

// Logs each ignored field name once per process (stderr), so clients' extra fields stay visible
// without flooding the log.
void log_ignored_fields(const std::vector<std::string>& fields);

// Each returns the parsed request, or sets *err and returns nullopt.
std::optional<ParsedRequest> parse_completion_request(const ojson& body, ApiError* err);
std::optional<ParsedRequest> parse_chat_request(const ojson& body, ApiError* err);
std::optional<ParsedRequest> parse_generate_request(const ojson& body, ApiError* err);

}  // namespace rlm
