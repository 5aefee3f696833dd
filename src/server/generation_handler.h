// POST /v1/completions, /v1/chat/completions and /generate: tokenizes, submits one sequence per
// prompt and choice, then answers from the request streams (chat outputs read for tool calls and
// reasoning by server/output_parser when the request and the server's parsers ask for it) — as one JSON body once every choice
// has finished, or as Server-Sent Events while tokens arrive. Nothing here waits: each
// RequestStream's listener posts a pump of the request onto its HTTP exchange's executor, which
// takes the waiting events and writes them. A client that goes away (or cannot keep up with its
// stream) has its sequences aborted at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/http_exchange.h"
#include "server/openai_protocol.h"
#include "server/output_parser.h"
#include "server/request_ids.h"
#include "server/serving_engine.h"

namespace rlm {

class GenerationHandler {
 public:
  // model_names: the names requests may give in 'model' (the first is the one responses report).
  // tool_format / reasoning_format: how chat outputs are read (--tool-call-parser, --reasoning-parser).
  GenerationHandler(ServingEngine& engine, RidAliases& aliases, std::vector<std::string> model_names,
                    ToolFormat tool_format = ToolFormat::kNone, ReasoningFormat reasoning_format = ReasoningFormat::kNone);

  // Answers one request whose body has been parsed into `body`.
  void handle(const std::shared_ptr<HttpExchange>& exchange, ApiKind kind, const ojson& body);

 private:
  ServingEngine& engine_;
  RidAliases& aliases_;
  std::vector<std::string> model_names_;
  std::string fingerprint_;
  ToolFormat tool_format_;
  ReasoningFormat reasoning_format_;
};

// The prompt text of a chat request: the conversation rendered by the chat template; with
// continue_final_message, cut right after the last message's content (the model continues it).
StatusOr<std::string> render_chat_prompt(const ServingEngine& engine, const ParsedRequest& r);

// OpenAI's system_fingerprint: "fp_" and a hash of the served model's name, vocabulary and context.
std::string system_fingerprint(const ServingEngine& engine);

}  // namespace rlm
