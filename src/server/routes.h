// The HTTP API of `radixlm serve`, as routes on an HttpRouter: OpenAI-compatible /v1/completions,
// /v1/chat/completions, /v1/models, /v1/models/{id}; the OpenAI Responses API /v1/responses and the
// Anthropic Messages API /v1/messages (+ /count_tokens) over the chat path; SGLang-style /generate; /health and /metrics (open without the
// API key, as in vLLM/SGLang); /tokenize, /detokenize; operator routes /flush_cache,
// /abort_request, /debug/kv, /server_info (the limits chosen at start-up). With an API key every
// route but the open ones needs
// "Authorization: Bearer KEY" (or Anthropic's "x-api-key: KEY"). With allowed origins, CORS preflight OPTIONS requests are answered
// (open, like vLLM's CORSMiddleware) and every response carries Access-Control-Allow-Origin.
#pragma once

#include <memory>
#include <string>

#include "server/generation_handler.h"
#include "server/http_config.h"
#include "server/http_router.h"
#include "server/request_ids.h"
#include "server/serving_engine.h"

namespace rlm {

class ApiRoutes {
 public:
  ApiRoutes(ServingEngine& engine, const HttpServerConfig& config);
  // Adds every route and the API-key guard to `router`; this object must outlive the router's use.
  void install(HttpRouter& router);

 private:
  void handle_tokenize(const std::shared_ptr<HttpExchange>& ex, const ojson& body);
  void handle_detokenize(const std::shared_ptr<HttpExchange>& ex, const ojson& body);
  void handle_messages(const std::shared_ptr<HttpExchange>& ex, bool count_only);
  void handle_responses(const std::shared_ptr<HttpExchange>& ex, const ojson& body);
  void handle_abort(const std::shared_ptr<HttpExchange>& ex, const ojson& body);
  void handle_flush(const std::shared_ptr<HttpExchange>& ex);
  HttpResponse models() const;
  ojson model_cards() const;
  std::optional<HttpResponse> unknown_model(const ojson& body) const;
  HttpResponse model_card(const std::string& id) const;
  HttpResponse debug_kv() const;

  ServingEngine& engine_;
  std::string api_key_;
  std::vector<std::string> model_names_;  // the served model's names, the reported id first
  std::vector<std::string> allowed_origins_;
  int64_t started_;
  RidAliases aliases_;
  GenerationHandler generation_;
};

// The one place request bodies become JSON: a JSON object, or a 400 error.
std::optional<ojson> parse_json_body(const std::string& body, ApiError* err);

}  // namespace rlm
