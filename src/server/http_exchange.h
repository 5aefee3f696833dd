// What route code sees of HTTP: a parsed request, a response, and the exchange that carries one
// request's response back to its client (whole, or streamed piece by piece). The transport
// (server/http_transport) implements HttpExchange over Boost.Beast; route code never sees Beast
// or socket types, and tests may implement HttpExchange in memory.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rlm {

// Header fields in arrival order; names compare case-insensitively.
class HttpHeaders {
 public:
  void add(std::string name, std::string value) { fields_.emplace_back(std::move(name), std::move(value)); }
  // The first value of `name`, or nullopt.
  std::optional<std::string_view> find(std::string_view name) const;
  size_t count(std::string_view name) const;
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// ASCII case-insensitive equality (header names, auth schemes, codings).
bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target up to '?'
  int version = 11;    // 10 or 11
  HttpHeaders headers;
  std::string body;    // with any Content-Encoding (gzip, deflate) removed
  std::string peer;    // the client's IP address
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra fields (e.g. Allow, WWW-Authenticate)
};

// One request's way back to its client. Every method must run on the exchange's executor: inside
// the route handler, or inside a function given to post() / defer(). A handler that cannot answer
// at once (generation) returns and answers later from a posted function; it never blocks.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;

  // A complete response. Ignored after a response has begun or once the client is gone.
  virtual void respond(HttpResponse response) = 0;

  // A streamed response: the status line and headers now, then write() pieces, then end_stream().
  // HTTP/1.1 clients get chunked transfer coding; HTTP/1.0 clients get the raw bytes and the
  // connection's close as the end.
  virtual void begin_stream(int status, std::string content_type, HttpHeaders headers) = 0;
  // Queues a piece of the stream. false when the client is gone, or when it has left more than the
  // configured stream buffer unread: it is then disconnected (on_disconnect runs) and the caller
  // should stop producing.
  virtual bool write(std::string data) = 0;
  virtual void end_stream() = 0;

  // Runs `fn` on this exchange's executor; callable from any thread (e.g. the scheduler's). `fn` runs
  // even if the client is gone by then.
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on this exchange's executor after `delay` (polling without holding a thread).
  virtual void defer(std::chrono::milliseconds delay, std::function<void()> fn) = 0;

  // `fn` runs once, on the executor, if the client goes away (closes, resets, stops reading, misses
  // a deadline) before the response is complete. It owns what it captures until the exchange dies.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
};

using HttpHandler = std::function<void(const std::shared_ptr<HttpExchange>&)>;

}  // namespace rlm
