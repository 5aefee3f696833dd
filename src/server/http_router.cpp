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

void HttpRouter::add_prefix(std::string method, std::string prefix, HttpHandler handler) {
  add(std::move(method), std::move(prefix), std::move(handler));
  routes_.back().prefix = true;
}

const HttpRoute* HttpRouter::match(std::string_view method, std::string_view path, std::string* allow) const {
  allow->clear();
  bool exact = false;
  for (const HttpRoute& r : routes_) exact = exact || (!r.prefix && r.path == path);
  for (const HttpRoute& r : routes_) {
    const bool hit = r.prefix ? !exact && path.size() > r.path.size() && path.substr(0, r.path.size()) == r.path
                              : r.path == path;
    if (!hit) continue;
    if (r.method == method) return &r;
    if (!allow->empty()) *allow += ", ";
    *allow += r.method;
  }
  if (!allow->empty() && method == "OPTIONS" && !cors_origins_.empty()) return &preflight_;
  return nullptr;
}

void HttpRouter::set_cors(std::vector<std::string> allowed_origins) {
  cors_origins_ = std::move(allowed_origins);
  preflight_ = {"OPTIONS", "", /*open=*/true, [this](const std::shared_ptr<HttpExchange>& ex) {
                  HttpResponse r{204, "", "", {}};
                  if (allowed_origin(ex->request())) {
                    r.headers.add("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                    const auto asked = ex->request().headers.find("Access-Control-Request-Headers");
                    r.headers.add("Access-Control-Allow-Headers", asked ? std::string(*asked) : "*");
                    r.headers.add("Access-Control-Max-Age", "600");
                  }
                  ex->respond(std::move(r));
                }};
}

std::optional<std::string> HttpRouter::allowed_origin(const HttpRequest& head) const {
  const std::optional<std::string_view> origin = head.headers.find("Origin");
  if (!origin || cors_origins_.empty()) return std::nullopt;
  for (const std::string& o : cors_origins_) {
    if (o == "*" || o == *origin) return std::string(*origin);
  }
  return std::nullopt;
}

HttpHeaders HttpRouter::cors_headers(const HttpRequest& head) const {
  HttpHeaders h;
  if (std::optional<std::string> origin = allowed_origin(head)) {
    h.add("Access-Control-Allow-Origin", *origin);
    h.add("Vary", "Origin");
  }
  return h;
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
