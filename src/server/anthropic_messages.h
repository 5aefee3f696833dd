// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API over the chat
// path. A request (system as a string or text blocks; messages with text, tool_use and
// tool_result blocks; tools with input_schema; max_tokens required; stop_sequences,
// temperature, top_p, top_k; thinking) becomes an OpenAI chat request for the chat template and
// GenerationHandler; the answer comes back as Anthropic content blocks (thinking, text,
// tool_use), non-streamed or as Anthropic's Server-Sent Events (message_start,
// content_block_start/delta/stop, message_delta with stop_reason and usage, message_stop).
// Errors have Anthropic's shape: {"type": "error", "error": {"type", "message"}}.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "server/generation_handler.h"
#include "server/http_router.h"
#include "server/openai_protocol.h"

namespace rlm {

// The chat request a Messages request stands for; `count_only` (count_tokens): max_tokens is not
// required. Sets *err (naming the Messages field) and returns nullopt when it is not valid.
std::optional<ParsedRequest> parse_messages_request(const ojson& body, bool count_only, ApiError* err);

// Writes answers as the Messages API does; `model`: the name responses report.
std::shared_ptr<ChatAnswerFormat> messages_format(std::string model);

// An ApiError in Anthropic's shape (same HTTP status).
HttpResponse anthropic_error_response(const ApiError& e);

}  // namespace rlm
