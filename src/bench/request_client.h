// One streaming generation request against an OpenAI-compatible or SGLang server: request body,
// SSE stream handling, timing. Used by the benchmark driver, one call per request and thread.
//
// Backends and endpoints:
//   openai       POST {prefix}/v1/completions       {"model", "prompt": [ids] | "text", "max_tokens",
//                                                    "stream": true, "stream_options": {"include_usage": true}}
//   openai-chat  POST {prefix}/v1/chat/completions  {"model", "messages": [...], "max_tokens", ...}
//   sglang       POST {prefix}/generate             {"input_ids" | "text", "sampling_params": {...},
//                                                    "stream": true}
// A chunk "carries text" when choices[0].text (completions), choices[0].delta.content or
// .reasoning_content (chat) is non-empty, or when SGLang's cumulative meta_info.completion_tokens
// (or text) grew. Output tokens: the final usage chunk's completion_tokens (SGLang: the last
// meta_info.completion_tokens); without one, the number of text-carrying chunks.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/metrics.h"
#include "core/status.h"

namespace rlm::bench {

enum class Backend { kOpenAiCompletions, kOpenAiChat, kSglang };

StatusOr<Backend> parse_backend(const std::string& name);
const char* backend_name(Backend backend);
// The request path below the base URL's prefix.
const char* backend_path(Backend backend);

// Where the server is: http://host:port[/prefix].
struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string path_prefix;  // e.g. "" or "/api"; no trailing '/'
  std::string api_key;      // sent as "Authorization: Bearer <key>" when non-empty
  double timeout_s = 6 * 3600.0;  // longest silence while connecting/reading
};

// Parses "http://host:port[/prefix]" (the port defaults to 80).
StatusOr<Endpoint> parse_base_url(const std::string& url);

struct ChatMessage {
  std::string role;
  std::string content;
};

// The content of one request; which fields are used depends on the backend.
struct RequestSpec {
  std::vector<int32_t> prompt_ids;    // completions / sglang with token-id prompts
  std::string prompt_text;            // completions / sglang with text prompts
  std::vector<ChatMessage> messages;  // chat
  int64_t planned_input_len = 0;
  int64_t max_tokens = 0;
};

struct RequestOptions {
  Backend backend = Backend::kOpenAiCompletions;
  std::string model;
  bool ignore_eos = true;
  double temperature = 0.0;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into the top-level body
};

nlohmann::json build_request_body(const RequestSpec& spec, const RequestOptions& options);

// Consumes a request's SSE event payloads with their arrival times and fills a RequestOutcome.
class StreamAccumulator {
 public:
  explicit StreamAccumulator(Backend backend) : backend_(backend) {}

  // `data`: one event payload; `t_s`: its arrival, seconds after the request was sent.
  void on_event(std::string_view data, double t_s);
  // Completes `out` (success, error, lengths, ttft, itl, text) once the response has ended at
  // `end_s` seconds after sending. `out.planned_input_len` must be set by the caller.
  void finish(double end_s, RequestOutcome& out) const;

 private:
  void on_text_chunk(double t_s);

  Backend backend_;
  std::string error_;
  bool done_ = false;            // saw [DONE] or a finish_reason
  bool first_chunk_ = true;
  double ttft_s_ = 0.0;
  double last_chunk_s_ = 0.0;
  double first_choice_s_ = -1.0;  // the first event carrying a choice (text or not)
  std::vector<double> itl_s_;
  int64_t num_chunks_ = 0;
  int64_t prompt_tokens_ = -1;   // from usage / meta_info, -1 if never reported
  int64_t completion_tokens_ = -1;
  std::string text_;
};

// Sends one streaming request and times it. Never throws for network or server errors: they
// come back as a failed outcome with a message. `bench_start` anchors RequestOutcome::start_s.
RequestOutcome send_request(const Endpoint& endpoint, const RequestOptions& options,
                            const RequestSpec& spec,
                            std::chrono::steady_clock::time_point bench_start);

// GET {prefix}/v1/models and return data[0].id.
StatusOr<std::string> fetch_first_model_id(const Endpoint& endpoint);

}  // namespace rlm::bench
