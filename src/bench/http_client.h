// One blocking HTTP/1.1 exchange for the benchmark client (each worker thread makes its own): it
// connects, sends one request and hands the response body to a callback as it arrives. Built on
// Boost.Beast with its own io_context per call, so a deadline covers the connect and each write
// and read. Failures come back classified (connect refused, timeout, read error, ...) for the
// benchmark's failure report.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rlm::bench {

struct HttpCall {
  std::string host;
  int port = 80;
  std::string method = "GET";
  std::string target = "/";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  double connect_timeout_s = 60.0;
  double timeout_s = 3600.0;  // longest wait for the response's head or for more of its body
};

struct HttpCallResult {
  int status = 0;          // 0 when no response head arrived
  bool complete = false;   // the whole response arrived
  std::string error_kind;  // "" when complete; "connect refused", "connect timeout", "connect error",
                           // "write error", "timeout" or "read error"
  std::string error;       // the message, naming the host and path
};

// Runs the call. `on_status` sees the status code once the head has arrived; `on_data` each piece of
// the (de-chunked) body. Never throws for network errors.
HttpCallResult http_call(const HttpCall& call, const std::function<void(int status)>& on_status,
                         const std::function<void(std::string_view data)>& on_data);

}  // namespace rlm::bench
