// Settings of the HTTP front end (`radixlm serve --http-*`; src/cli/http_flags.h registers them).
// Deadlines follow nginx's defaults; docs/design/http_server.md explains each.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rlm {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                    // 0: any free port
  std::string api_key;                // empty: no authentication
  std::vector<std::string> model_aliases;    // more names the served model answers to (--served-model-name)
  std::string tool_call_parser = "auto";     // chat tool calls: auto|none|hermes|llama3_json|mistral|qwen3_coder|pythonic
  std::string reasoning_parser = "none";    // <think> reasoning: none|qwen3|deepseek-r1
  std::vector<std::string> allowed_origins;  // CORS: origins allowed to call the API ("*": any); empty: no CORS
  int io_threads = 4;                 // threads running the event loop (not one per connection)
  int backlog = SOMAXCONN;            // listen queue for connection bursts (the kernel caps it at somaxconn)
  double keepalive_timeout_s = 75;    // an idle keep-alive connection is closed after this
  double header_timeout_s = 60;       // the whole request head must arrive within this
  double body_timeout_s = 60;         // the whole request body must arrive within this
  double send_timeout_s = 60;         // a write to the client that makes no progress this long drops it
  int64_t max_header_bytes = 32 * 1024;         // request line + header fields (431 beyond)
  int64_t max_body_bytes = 64 * 1024 * 1024;    // after chunked and gzip/deflate decoding (413 beyond)
  int64_t stream_buffer_bytes = 1024 * 1024;    // unread bytes of one response before the client is dropped
};

}  // namespace rlm
