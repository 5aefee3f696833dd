// The route table of the HTTP server: (method, exact path) -> handler, the 404/405 decision with
// its Allow list, and an access guard (the API key) that the transport applies to the request
// head before it reads the body. Transport-agnostic: server/routes fills it, the transport uses it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/http_exchange.h"

namespace rlm {

struct HttpRoute {
  std::string method;
  std::string path;
  bool open = false;  // served without the API key (/health, /metrics, static pages)
  HttpHandler handler;
  bool prefix = false;  // matches every path that starts with `path` (e.g. "/v1/models/" + id)
};

class HttpRouter {
 public:
  // Access check on the request head (body not read yet): nullopt lets the request through,
  // otherwise the response to send instead.
  using Guard = std::function<std::optional<HttpResponse>(const HttpRequest& head, const HttpRoute& route)>;

  void add(std::string method, std::string path, HttpHandler handler, bool open = false);
  // A route for every path longer than `prefix` that starts with it; exact routes win.
  void add_prefix(std::string method, std::string prefix, HttpHandler handler);
  void set_guard(Guard guard) { guard_ = std::move(guard); }
  // CORS for these origins ("*": any): OPTIONS preflight requests to any routed path are answered
  // 204 without the API key (as browsers send them without credentials), and cors_headers() gives
  // the fields every response to an allowed Origin carries.
  void set_cors(std::vector<std::string> allowed_origins);
  HttpHeaders cors_headers(const HttpRequest& head) const;

  // The route for (method, path), or nullptr. Then *allow lists the methods `path` has
  // ("GET, POST": answer 405 with it), or is empty when no route has that path (404).
  const HttpRoute* match(std::string_view method, std::string_view path, std::string* allow) const;
  std::optional<HttpResponse> check_access(const HttpRequest& head, const HttpRoute& route) const;

 private:
  std::optional<std::string> allowed_origin(const HttpRequest& head) const;

  std::vector<HttpRoute> routes_;
  Guard guard_;
  std::vector<std::string> cors_origins_;
  HttpRoute preflight_;
};

// JSON bodies in OpenAI's error shape.
HttpResponse error_response(const ApiError& error);
HttpResponse json_response(int status, const nlohmann::ordered_json& body);

}  // namespace rlm
