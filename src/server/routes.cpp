#include "server/routes.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/check.h"
#include "core/json.h"
#include "server/anthropic_messages.h"
#include "server/api_key.h"
#include "server/chat_page.h"
#include "server/responses_api.h"
#include "server/vllm_metrics.h"
#include "server/worker_routes.h"

namespace rlm {

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using JsonHandler = std::function<void(const std::shared_ptr<HttpExchange>&, const ojson&)>;

// A handler that parses the body first (400 on bad JSON).
HttpHandler with_json_body(JsonHandler handler) {
  return [handler = std::move(handler)](const std::shared_ptr<HttpExchange>& ex) {
    ApiError err;
    std::optional<ojson> body = parse_json_body(ex->request().body, &err);
    if (!body) return ex->respond(error_response(err));
    handler(ex, *body);
  };
}

// %XX escapes of a URL path segment decoded ("Qwen%2FQwen3-8B" -> "Qwen/Qwen3-8B"); a malformed
// escape stays as it is.
std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() + 0 && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A handler whose response needs nothing but the engine's state.
HttpHandler answer(std::function<HttpResponse()> make) {
  return [make = std::move(make)](const std::shared_ptr<HttpExchange>& ex) { ex->respond(make()); };
}

}  // namespace

std::optional<ojson> parse_json_body(const std::string& body, ApiError* err) {
  StatusOr<ojson> parsed = parse_ordered_json(body, kRequestJsonLimits);
  if (!parsed.is_ok()) {
    *err = ApiError::bad_request(str("request body: ", parsed.status().message()));
    return std::nullopt;
  }
  ojson out = std::move(parsed).value();
  if (!out.is_object()) {
    *err = ApiError::bad_request("the request body must be a JSON object");
    return std::nullopt;
  }
  return out;
}

std::vector<std::string> model_names(const ServingEngine& engine, const HttpServerConfig& config) {
  std::vector<std::string> names = {engine.model_name()};
  for (const std::string& a : config.model_aliases) {
    if (std::find(names.begin(), names.end(), a) == names.end()) names.push_back(a);
  }
  return names;
}

// The tool-call and reasoning formats the flags name (the serve command checked the names).
ToolFormat tool_format(const ServingEngine& engine, const std::string& name) {
  StatusOr<ToolFormat> f = tool_format_from_name(name, engine.has_chat_template() ? engine.chat_template_source() : "");
  RLM_CHECK(f.is_ok()) << f.status().message();
  return *f;
}

ReasoningFormat reasoning_format(const std::string& name) {
  StatusOr<ReasoningFormat> f = reasoning_format_from_name(name);
  RLM_CHECK(f.is_ok()) << f.status().message();
  return *f;
}

ApiRoutes::ApiRoutes(ServingEngine& engine, const HttpServerConfig& config)
    : engine_(engine),
      api_key_(config.api_key),
      model_names_(model_names(engine, config)),
      allowed_origins_(config.allowed_origins),
      started_(unix_now()),
      generation_(engine, aliases_, model_names_, tool_format(engine, config.tool_call_parser),
                  reasoning_format(config.reasoning_parser)) {}

void ApiRoutes::install(HttpRouter& router) {
  if (!allowed_origins_.empty()) router.set_cors(allowed_origins_);
  if (!api_key_.empty()) {
    router.set_guard([key = api_key_](const HttpRequest& head, const HttpRoute& route) -> std::optional<HttpResponse> {
      if (route.open) return std::nullopt;
      const std::optional<std::string_view> auth = head.headers.find("Authorization");
      if (bearer_matches(auth, key)) return std::nullopt;
      // Anthropic clients send the key as x-api-key.
      const std::optional<std::string_view> x_api_key = head.headers.find("x-api-key");
      if (x_api_key && constant_time_equals(*x_api_key, key)) return std::nullopt;
      HttpResponse r = error_response({401, auth ? "invalid API key" : "missing API key (Authorization: Bearer ...)",
                                       "authentication_error", ""});
      r.headers.add("WWW-Authenticate", "Bearer");
      return r;
    });
  }
  for (auto [path, kind] : {std::pair{"/v1/completions", ApiKind::kCompletion},
                            std::pair{"/v1/chat/completions", ApiKind::kChat},
                            std::pair{"/generate", ApiKind::kGenerate}}) {
    router.add("POST", path, with_json_body([this, kind](const std::shared_ptr<HttpExchange>& ex, const ojson& body) {
                 generation_.handle(ex, kind, body);
               }));
  }
  router.add("POST", "/v1/messages", [this](const auto& ex) { handle_messages(ex, /*count_only=*/false); });
  router.add("POST", "/v1/messages/count_tokens", [this](const auto& ex) { handle_messages(ex, /*count_only=*/true); });
  router.add("POST", "/v1/responses", with_json_body([this](const auto& ex, const ojson& b) { handle_responses(ex, b); }));
  router.add("GET", "/v1/models", answer([this] { return models(); }));
  router.add_prefix("GET", "/v1/models/", [this](const std::shared_ptr<HttpExchange>& ex) {
    ex->respond(model_card(percent_decode(ex->request().path.substr(std::string_view("/v1/models/").size()))));
  });
  // The limits chosen at start-up (ServingEngine::server_info).
  router.add("GET", "/server_info", answer([this] { return json_response(200, engine_.server_info()); }));
  router.add("POST", "/tokenize", with_json_body([this](const auto& ex, const ojson& b) { handle_tokenize(ex, b); }));
  router.add("POST", "/detokenize", with_json_body([this](const auto& ex, const ojson& b) { handle_detokenize(ex, b); }));
  router.add("GET", "/health", answer([this] {
               return engine_.draining() ? json_response(503, {{"status", "shutting down"}})
                                         : json_response(200, {{"status", "ok"}});
             }), /*open=*/true);
  router.add("GET", "/metrics", answer([this] {
               HttpResponse r;
               r.content_type = "text/plain; version=0.0.4";
               r.body = engine_.metrics().render_prometheus() + render_vllm_metrics(engine_.metrics(), model_names_[0]);
               return r;
             }), /*open=*/true);
  router.add("POST", "/abort_request", with_json_body([this](const auto& ex, const ojson& b) { handle_abort(ex, b); }));
  router.add("GET", "/debug/kv", answer([this] { return debug_kv(); }));
  router.add("POST", "/flush_cache", [this](const std::shared_ptr<HttpExchange>& ex) { handle_flush(ex); });
  // What routers and gateways ask of a worker (sglang-router, vllm-router).
  install_worker_routes(router, engine_, generation_, model_names_);
  // The chat page is an open route: the page itself holds no data, its requests carry the key.
  router.add("GET", "/", answer([] { return HttpResponse{200, "text/html; charset=utf-8", chat_page_html(), {}}; }),
             /*open=*/true);
}

// vLLM's /tokenize: {prompt, add_special_tokens (default true)} or a chat {messages, tools,
// add_generation_prompt, continue_final_message, chat_template_kwargs, add_special_tokens (default
// false)}, both with return_token_strs; answers {count, max_model_len, tokens, token_strs}.
void ApiRoutes::handle_tokenize(const std::shared_ptr<HttpExchange>& ex, const ojson& body) {
  auto fail = [&](const std::string& msg, const std::string& param) {
    ex->respond(error_response(ApiError::bad_request(msg, param)));
  };
  if (std::optional<HttpResponse> unknown = unknown_model(body)) return ex->respond(*unknown);
  bool add_special = !body.contains("messages");
  bool token_strs = false;
  for (auto [name, out] : {std::pair{"add_special_tokens", &add_special}, std::pair{"return_token_strs", &token_strs}}) {
    if (!body.contains(name) || body[name].is_null()) continue;
    if (!body[name].is_boolean()) return fail(str("'", name, "' must be a boolean"), name);
    *out = body[name].get<bool>();
  }
  std::string text;
  if (body.contains("prompt") && body["prompt"].is_string()) {
    text = body["prompt"].get<std::string>();
  } else if (body.contains("messages")) {
    ojson chat = body;
    chat.erase("add_special_tokens");
    chat.erase("return_token_strs");
    ApiError err;
    auto parsed = parse_chat_request(chat, &err);
    if (!parsed) return ex->respond(error_response(err));
    log_ignored_fields(parsed->ignored_fields);
    auto rendered = render_chat_prompt(engine_, *parsed);
    if (!rendered.is_ok()) return ex->respond(error_response(ApiError::from_status(rendered.status())));
    text = *rendered;
  } else {
    return fail("give 'prompt' (a string) or 'messages'", "prompt");
  }
  std::vector<int32_t> ids = engine_.encode(text, add_special);
  ojson strs = nullptr;
  if (token_strs) {
    strs = ojson::array();
    for (int32_t id : ids) strs.push_back(engine_.tokenizer().id_to_token(id).value_or(engine_.token_text(id)));
  }
  ex->respond(json_response(200, {{"count", static_cast<int64_t>(ids.size())},
                                  {"max_model_len", engine_.max_context_len()},
                                  {"tokens", ids},
                                  {"token_strs", strs}}));
}

// The Anthropic Messages API (server/anthropic_messages.h); errors, bad JSON included, in its shape.
void ApiRoutes::handle_messages(const std::shared_ptr<HttpExchange>& ex, bool count_only) {
  ApiError err;
  std::optional<ojson> body = parse_json_body(ex->request().body, &err);
  std::optional<ParsedRequest> parsed;
  if (body) parsed = parse_messages_request(*body, count_only, &err);
  if (!parsed) return ex->respond(anthropic_error_response(err));
  if (!count_only) return generation_.handle_chat(ex, std::move(*parsed), messages_format(generation_.model_name()));
  log_ignored_fields(parsed->ignored_fields);
  if (std::optional<HttpResponse> unknown = unknown_model(*body)) {
    return ex->respond(anthropic_error_response({404, "The model does not exist.", "not_found_error", "model"}));
  }
  auto rendered = render_chat_prompt(engine_, *parsed);
  if (!rendered.is_ok()) return ex->respond(anthropic_error_response(ApiError::from_status(rendered.status())));
  const int64_t n = static_cast<int64_t>(engine_.encode(*rendered, /*add_special_tokens=*/false).size());
  ex->respond(json_response(200, {{"input_tokens", n}}));
}

// The OpenAI Responses API (server/responses_api.h).
void ApiRoutes::handle_responses(const std::shared_ptr<HttpExchange>& ex, const ojson& body) {
  ApiError err;
  std::optional<ParsedRequest> parsed = parse_responses_request(body, &err);
  if (!parsed) return ex->respond(error_response(err));
  auto count = [this](const std::string& text) {
    return static_cast<int64_t>(engine_.encode(text, /*add_special_tokens=*/false).size());
  };
  generation_.handle_chat(ex, std::move(*parsed), responses_format(body, generation_.model_name(), count));
}

void ApiRoutes::handle_detokenize(const std::shared_ptr<HttpExchange>& ex, const ojson& body) {
  if (std::optional<HttpResponse> unknown = unknown_model(body)) return ex->respond(*unknown);
  if (!body.contains("tokens") || !body["tokens"].is_array()) {
    return ex->respond(error_response(ApiError::bad_request("'tokens' must be an array of token ids", "tokens")));
  }
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= engine_.vocab_size()) {
      return ex->respond(error_response(ApiError::bad_request(str("token ", t.dump(), " is not a valid id"), "tokens")));
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  ex->respond(json_response(200, {{"prompt", engine_.tokenizer().decode(ids, false)}}));
}

// A 404 when the body names a model this server does not serve (a missing model is fine).
std::optional<HttpResponse> ApiRoutes::unknown_model(const ojson& body) const {
  if (!body.contains("model") || body["model"].is_null()) return std::nullopt;
  if (body["model"].is_string() &&
      std::find(model_names_.begin(), model_names_.end(), body["model"].get<std::string>()) != model_names_.end()) {
    return std::nullopt;
  }
  return error_response({404, "The model does not exist.", "not_found_error", "model"});
}

// SGLang's /abort_request {"rid": ...}: the id of one request (a server id, which only its client
// knows, or the caller's own /generate rid alias), or of one of its choices ("<id>-<i>"). Matched
// exactly; answered 200 whether or not the request was still running (it may just have finished).
void ApiRoutes::handle_abort(const std::shared_ptr<HttpExchange>& ex, const ojson& body) {
  if (!body.contains("rid") || !body["rid"].is_string() || body["rid"].get<std::string>().empty()) {
    return ex->respond(error_response(
        ApiError::bad_request("'rid' (the request id to abort) must be a non-empty string", "rid")));
  }
  const std::string rid = body["rid"].get<std::string>();
  const std::optional<std::string> aliased = aliases_.resolve(RidAliases::namespace_of(ex->request()), rid);
  engine_.abort(aliased ? *aliased : rid);
  ex->respond(json_response(200, {{"status", "abort requested"}}));
}

// Like SGLang's /flush_cache: answers once the cache is flushed, which happens when no request is
// running; a server still busy after 10 s answers 202 and flushes when it is next idle. Polls
// with a timer: no thread waits.
void ApiRoutes::handle_flush(const std::shared_ptr<HttpExchange>& ex) {
  const uint64_t ticket = engine_.request_flush();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto poll = std::make_shared<std::function<void()>>();
  *poll = [this, ex, ticket, deadline, weak = std::weak_ptr<std::function<void()>>(poll)] {
    if (engine_.flush_done(ticket)) return ex->respond(json_response(200, {{"status", "flushed"}}));
    if (std::chrono::steady_clock::now() >= deadline || ex->disconnected()) {
      return ex->respond(json_response(
          202, {{"status", "flush pending: requests are running; the cache is flushed when the server is idle"}}));
    }
    if (auto self = weak.lock()) ex->defer(std::chrono::milliseconds(10), [self] { (*self)(); });
  };
  (*poll)();
}

HttpResponse ApiRoutes::models() const { return json_response(200, {{"object", "list"}, {"data", model_cards()}}); }

ojson ApiRoutes::model_cards() const {
  ojson data = ojson::array();
  for (const std::string& name : model_names_) {
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", started_},
                    {"owned_by", "radixlm"},
                    {"root", engine_.model_name()},
                    {"max_model_len", engine_.max_context_len()}});
  }
  return data;
}

// GET /v1/models/{id}: one card of models(), or OpenAI's 404.
HttpResponse ApiRoutes::model_card(const std::string& id) const {
  for (const ojson& card : model_cards()) {
    if (card["id"] == id) return json_response(200, card);
  }
  return error_response({404, str("The model `", id, "` does not exist."), "not_found_error", "model"});
}

HttpResponse ApiRoutes::debug_kv() const {
  const SchedulerGauges g = engine_.metrics().gauges();
  return json_response(200, {{"kv_pages_total", g.kv_pages_total},
                             {"kv_pages_free", g.kv_pages_free},
                             {"page_size", g.page_size},
                             {"cache_tokens", g.cache_tokens},
                             {"cache_evictable_tokens", g.cache_evictable},
                             {"cache_protected_tokens", g.cache_tokens - g.cache_evictable},
                             {"running", g.running},
                             {"queued", g.queued}});
}

}  // namespace rlm
