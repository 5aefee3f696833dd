#include "server/http_server.h"

namespace rlm {

HttpServer::HttpServer(ServingEngine& engine, HttpServerConfig config) : routes_(engine, config) {
  routes_.install(router_);
  transport_ = std::make_unique<HttpTransport>(router_, std::move(config));
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() { return transport_->bind(); }

bool HttpServer::listen_after_bind() {
  transport_->run();
  return true;
}

bool HttpServer::listen() {
  if (bind() < 0) return false;
  return listen_after_bind();
}

void HttpServer::stop() { transport_->stop(); }

}  // namespace rlm
