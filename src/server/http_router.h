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
};

class HttpRouter {
 public:
  // Access check on the request head (body not read yet): nullopt lets the request through,
  // otherwise the response to send instead.
  using Guard = std::function<std::optional<HttpResponse>(const HttpRequest& head, const HttpRoute& route)>;

  void add(std::string method, std::string path, HttpHandler handler, bool open = false);
  void set_guard(Guard guard) { guard_ = std::move(guard); }

  // The route for (method, path), or nullptr. Then *allow lists the methods `path` has
  // ("GET, POST": answer 405 with it), or is empty when no route has that path (404).
  const HttpRoute* match(std::string_view method, std::string_view path, std::string* allow) const;
  std::optional<HttpResponse> check_access(const HttpRequest& head, const HttpRoute& route) const;

 private:
  std::vector<HttpRoute> routes_;
  Guard guard_;
};

// JSON bodies in OpenAI's error shape.
HttpResponse error_response(const ApiError& error);
HttpResponse json_response(int status, const nlohmann::ordered_json& body);

}  // namespace rlm
