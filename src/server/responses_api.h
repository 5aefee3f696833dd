// POST /v1/responses: the OpenAI Responses API over the chat path. `input` (a string, or items:
// messages with input_text / output_text parts, function_call and function_call_output items),
// `instructions`, `max_output_tokens`, function `tools` and `tool_choice` become an OpenAI chat
// request for the chat template and GenerationHandler; the answer comes back as output items
// (reasoning when a reasoning parser is set, a message with output_text, function_call items),
// non-streamed or as the Responses event stream (response.created, response.in_progress,
// response.output_item.added, response.content_part.added, response.output_text.delta / done,
// response.function_call_arguments.delta / done, response.output_item.done, response.completed).
// Responses are not stored: `previous_response_id` is a 400 and every response says store: false.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/generation_handler.h"
#include "server/openai_protocol.h"

namespace rlm {

// The chat request a Responses request stands for; sets *err and returns nullopt when it is not
// valid.
std::optional<ParsedRequest> parse_responses_request(const ojson& body, ApiError* err);

// Writes answers as the Responses API does. `request`: the body (echoed fields: instructions,
// tools, ...); `model`: the name responses report; `count_tokens`: tokens of a text (for
// output_tokens_details.reasoning_tokens).
std::shared_ptr<ChatAnswerFormat> responses_format(const ojson& request, std::string model,
                                                   std::function<int64_t(const std::string&)> count_tokens);

}  // namespace rlm
