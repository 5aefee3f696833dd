// The HTTP front end (cpp-httplib): OpenAI-compatible /v1/completions, /v1/chat/completions,
// /v1/models; SGLang-style /generate; /health, /metrics, /tokenize, /detokenize, /flush_cache and
// /debug/kv. Streaming is Server-Sent Events; a client that goes away mid-stream aborts its request.
#pragma once

#include <memory>
#include <string>

#include "server/serving_engine.h"

namespace httplib {
class Server;
}

namespace rlm {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;   // empty: no authentication
  int num_threads = 128; // HTTP worker threads (each open stream holds one)
};

class HttpServer {
 public:
  HttpServer(ServingEngine& engine, HttpServerConfig config);
  ~HttpServer();
  // Binds and serves until stop(); returns false when the address cannot be bound.
  bool listen();
  // Binds to config.port (0 picks a free one) and returns the port, or -1.
  int bind();
  bool listen_after_bind();
  void stop();

 private:
  void install_routes();
  ServingEngine& engine_;
  HttpServerConfig config_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace rlm
