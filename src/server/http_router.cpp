#include "server/http_router.h"

#include <cctype>

#include "core/check.h"

namespace rlm {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::optional<std::string_view> HttpHeaders::find(std::string_view name) const {
  for (const auto& [n, v] : fields_) {
    if (iequals(n, name)) return std::string_view(v);
  }
  return std::nullopt;
}

size_t HttpHeaders::count(std::string_view name) const {
  size_t n = 0;
  for (const auto& f : fields_) n += iequals(f.first, name) ? 1 : 0;
  return n;
}

void HttpRouter::add(std::string method, std::string path, HttpHandler handler, bool open) {
  for (const HttpRoute& r : routes_) {
    RLM_CHECK(r.method != method || r.path != path) << "route " << method << " " << path << " added twice";
  }
  routes_.push_back({std::move(method), std::move(path), open, std::move(handler)});
}

const HttpRoute* HttpRouter::match(std::string_view method, std::string_view path, std::string* allow) const {
  allow->clear();
  for (const HttpRoute& r : routes_) {
    if (r.path != path) continue;
    if (r.method == method) return &r;
    if (!allow->empty()) *allow += ", ";
    *allow += r.method;
  }
  return nullptr;
}

std::optional<HttpResponse> HttpRouter::check_access(const HttpRequest& head, const HttpRoute& route) const {
  if (!guard_) return std::nullopt;
  return guard_(head, route);
}

HttpResponse json_response(int status, const nlohmann::ordered_json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return r;
}

HttpResponse error_response(const ApiError& error) { return json_response(error.http_status, error.to_json()); }

}  // namespace rlm
