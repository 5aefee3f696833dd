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
#include "server/http_router.h"
#include "server/openai_protocol.h"
#include "server/output_parser.h"
#include "server/request_ids.h"
#include "server/serving_engine.h"

namespace rlm {

// The end of one chat answer, read by the output parser: what the Messages and Responses APIs
// report.
struct ChatResult {
  OutputView view;                     // reasoning, content and tool calls
  std::vector<std::string> call_ids;   // one per view.calls entry
  FinishInfo finish;                   // reason, matched stop, token counts
};

// Writes a chat request's answer in another API's shape than OpenAI chat completions
// (/v1/messages, /v1/responses): one sequence (n = 1), read by an OutputParser.
class ChatAnswerFormat {
 public:
  virtual ~ChatAnswerFormat() = default;
  // An error before or instead of the answer, in this API's shape.
  virtual HttpResponse error(const ApiError& e) const = 0;
  // The non-streamed body.
  virtual ojson response(const ChatResult& r) = 0;
  // Streaming: the events before the first delta, for each delta, and once the answer ended (or
  // failed inside the engine).
  virtual std::string stream_begin(int64_t prompt_tokens) = 0;
  virtual std::string stream_delta(const OutputDelta& d) = 0;
  virtual std::string stream_end(const ChatResult& r) = 0;
  virtual std::string stream_error(const std::string& message) = 0;
};

class GenerationHandler {
 public:
  // model_names: the names requests may give in 'model' (the first is the one responses report).
  // tool_format / reasoning_format: how chat outputs are read (--tool-call-parser, --reasoning-parser).
  GenerationHandler(ServingEngine& engine, RidAliases& aliases, std::vector<std::string> model_names,
                    ToolFormat tool_format = ToolFormat::kNone, ReasoningFormat reasoning_format = ReasoningFormat::kNone);

  // Answers one request whose body has been parsed into `body`.
  void handle(const std::shared_ptr<HttpExchange>& exchange, ApiKind kind, const ojson& body);
  // Answers a chat request another API's route has parsed, in that API's shape (`format`).
  void handle_chat(const std::shared_ptr<HttpExchange>& exchange, ParsedRequest parsed,
                   std::shared_ptr<ChatAnswerFormat> format);
  // The served model's name (what responses report).
  const std::string& model_name() const { return model_names_.front(); }

 private:
  void start(const std::shared_ptr<HttpExchange>& exchange, ApiKind kind, ParsedRequest& parsed,
             std::shared_ptr<ChatAnswerFormat> format);

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
