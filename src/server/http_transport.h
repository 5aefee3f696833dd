// The HTTP/1.1 transport of `radixlm serve`, on Boost.Beast and Asio with C++20 coroutines: a few
// I/O threads serve any number of connections, each a coroutine on its own strand. It reads
// requests under header/body deadlines and size limits (bodies counted after chunked and
// gzip/deflate decoding), answers protocol errors itself (400, 405 + Allow, 408, 413, 415, 417,
// 431, 501), keeps connections alive and answers pipelined requests in order, and hands each
// request to its route as an HttpExchange. While a route works on a request the connection keeps
// reading, so a client that closes is noticed at once (the exchange's on_disconnect runs). Streamed
// responses are buffered per request up to a bound; a client that does not read them is dropped.
// Design: docs/design/http_server.md.
#pragma once

#include <memory>
#include <string>

#include "server/http_config.h"
#include "server/http_router.h"

namespace rlm {

class HttpTransport {
 public:
  // `router` must outlive the transport.
  HttpTransport(const HttpRouter& router, HttpServerConfig config);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds config.host:config.port and listens (backlog config.backlog; SO_REUSEADDR but never
  // SO_REUSEPORT, so a second server on the same port fails here). Returns the port (a free one
  // when config.port is 0), or -1 with the reason in bind_error().
  int bind();
  const std::string& bind_error() const;
  // Serves on config.io_threads threads until stop(); returns when they have ended.
  void run();
  // Stops accepting, closes every connection and ends run(). Callable from any thread.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlm
