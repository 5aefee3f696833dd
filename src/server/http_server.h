// The HTTP front end of `radixlm serve`: the API routes (server/routes) on the asynchronous
// Boost.Beast transport (server/http_transport). Design: docs/design/http_server.md.
#pragma once

#include <memory>
#include <string>

#include "server/http_config.h"
#include "server/http_router.h"
#include "server/http_transport.h"
#include "server/routes.h"
#include "server/serving_engine.h"

namespace rlm {

class HttpServer {
 public:
  HttpServer(ServingEngine& engine, HttpServerConfig config);
  ~HttpServer();

  // Binds to config.port (0 picks a free one) and returns the port, or -1 (reason: bind_error()).
  int bind();
  const std::string& bind_error() const { return transport_->bind_error(); }
  // Serves until stop().
  bool listen_after_bind();
  // Binds and serves until stop(); false when the address cannot be bound.
  bool listen();
  void stop();

 private:
  ApiRoutes routes_;
  HttpRouter router_;
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace rlm
