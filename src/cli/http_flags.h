// The HTTP front end's own flags of `radixlm serve` (--http-*), written into an HttpServerConfig.
// --host, --port and --api-key stay with the serve command.
#pragma once

#include <CLI/CLI.hpp>

#include "server/http_config.h"

namespace rlm::cli {

inline void add_http_flags(CLI::App* app, HttpServerConfig& c) {
  app->add_option("--http-threads", c.io_threads,
                  "I/O threads of the asynchronous HTTP server (each serves any number of connections)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app->add_option("--http-backlog", c.backlog, "Listen backlog for connection bursts (the kernel caps it at somaxconn)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--http-keepalive-timeout", c.keepalive_timeout_s, "Seconds an idle keep-alive connection stays open")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--http-header-timeout", c.header_timeout_s, "Seconds for a request's whole head to arrive (408)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--http-body-timeout", c.body_timeout_s, "Seconds for a request's whole body to arrive (408)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--http-send-timeout", c.send_timeout_s,
                  "Seconds a write to a client may make no progress before the client is dropped")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--http-max-header-bytes", c.max_header_bytes, "Largest request head: request line + fields (431)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  app->add_option("--http-max-body-bytes", c.max_body_bytes,
                  "Largest request body after chunked and gzip/deflate decoding (413)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app->add_option("--http-stream-buffer-bytes", c.stream_buffer_bytes,
                  "Unread bytes a streaming client may leave queued before it is dropped and its request aborted")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 40));
}

}  // namespace rlm::cli
