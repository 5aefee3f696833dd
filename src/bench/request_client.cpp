#include "bench/request_client.h"

#include <algorithm>
#include <cstdlib>

#include "bench/http_client.h"
#include "bench/sse_parser.h"
#include "core/json.h"

namespace rlm::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxErrorBody = 512;
constexpr double kMaxConnectSeconds = 60.0;  // a TCP connect that takes longer has failed

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string truncated(std::string_view s, size_t n = 200) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

// Fills `out` with the string at `key` if `j` is an object holding a non-empty string there.
bool nonempty_string(const nlohmann::json& j, const char* key, std::string& out) {
  if (!j.is_object()) return false;
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  out = it->get<std::string>();
  return !out.empty();
}

int64_t int_or(const nlohmann::json& j, const char* key, int64_t fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::vector<std::pair<std::string, std::string>> request_headers(const Endpoint& e, bool stream) {
  std::vector<std::pair<std::string, std::string>> h;
  if (stream) h.emplace_back("Accept", "text/event-stream");
  if (!e.api_key.empty()) h.emplace_back("Authorization", "Bearer " + e.api_key);
  return h;
}

HttpCall make_call(const Endpoint& e, std::string method, std::string target, bool stream) {
  HttpCall call;
  call.host = e.host;
  call.port = e.port;
  call.method = std::move(method);
  call.target = std::move(target);
  call.headers = request_headers(e, stream);
  call.timeout_s = e.timeout_s;
  call.connect_timeout_s = std::min(e.timeout_s, kMaxConnectSeconds);
  return call;
}

}  // namespace

StatusOr<Backend> parse_backend(const std::string& name) {
  if (name == "openai" || name == "vllm" || name == "sglang-oai") return Backend::kOpenAiCompletions;
  if (name == "openai-chat" || name == "vllm-chat" || name == "sglang-oai-chat") {
    return Backend::kOpenAiChat;
  }
  if (name == "sglang" || name == "sglang-native") return Backend::kSglang;
  return invalid_argument(
      str("unknown --backend '", name, "' (expected openai, openai-chat or sglang)"));
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kOpenAiCompletions: return "openai";
    case Backend::kOpenAiChat: return "openai-chat";
    case Backend::kSglang: return "sglang";
  }
  return "?";
}

const char* backend_path(Backend backend) {
  switch (backend) {
    case Backend::kOpenAiCompletions: return "/v1/completions";
    case Backend::kOpenAiChat: return "/v1/chat/completions";
    case Backend::kSglang: return "/generate";
  }
  return "/";
}

StatusOr<Endpoint> parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) {
    return unimplemented(str("--base-url '", url, "': https is not supported, use http://"));
  }
  if (url.rfind(scheme, 0) != 0) {
    return invalid_argument(str("--base-url '", url, "' must start with http://"));
  }
  std::string rest = url.substr(scheme.size());
  Endpoint e;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) e.path_prefix = rest.substr(slash);
  while (!e.path_prefix.empty() && e.path_prefix.back() == '/') e.path_prefix.pop_back();
  const size_t colon = authority.rfind(':');
  e.port = 80;
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    const std::string port = authority.substr(colon + 1);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535) {
      return invalid_argument(str("--base-url '", url, "': bad port '", port, "'"));
    }
    e.port = static_cast<int>(p);
    authority = authority.substr(0, colon);
  }
  if (authority.size() >= 2 && authority.front() == '[' && authority.back() == ']') {
    authority = authority.substr(1, authority.size() - 2);
  }
  if (authority.empty()) return invalid_argument(str("--base-url '", url, "' has no host"));
  e.host = authority;
  return e;
}

nlohmann::json build_request_body(const RequestSpec& spec, const RequestOptions& o) {
  nlohmann::json body = nlohmann::json::object();
  switch (o.backend) {
    case Backend::kOpenAiCompletions:
    case Backend::kOpenAiChat:
      body["model"] = o.model;
      if (o.backend == Backend::kOpenAiChat) {
        nlohmann::json messages = nlohmann::json::array();
        for (const ChatMessage& m : spec.messages) {
          messages.push_back({{"role", m.role}, {"content", m.content}});
        }
        body["messages"] = std::move(messages);
      } else if (!spec.prompt_ids.empty()) {
        body["prompt"] = spec.prompt_ids;
      } else {
        body["prompt"] = spec.prompt_text;
      }
      body["max_tokens"] = spec.max_tokens;
      body["temperature"] = o.temperature;
      body["ignore_eos"] = o.ignore_eos;
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      break;
    case Backend::kSglang:
      if (!spec.prompt_ids.empty()) {
        body["input_ids"] = spec.prompt_ids;
      } else {
        body["text"] = spec.prompt_text;
      }
      body["sampling_params"] = {{"max_new_tokens", spec.max_tokens},
                                 {"temperature", o.temperature},
                                 {"ignore_eos", o.ignore_eos}};
      body["stream"] = true;
      break;
  }
  for (const auto& [key, value] : o.extra_body.items()) body[key] = value;
  return body;
}

void StreamAccumulator::on_text_chunk(double t_s) {
  if (first_chunk_) {
    ttft_s_ = t_s;
    first_chunk_ = false;
  } else {
    itl_s_.push_back(t_s - last_chunk_s_);
  }
  last_chunk_s_ = t_s;
  ++num_chunks_;
}

void StreamAccumulator::on_event(std::string_view data, double t_s) {
  if (!error_.empty()) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  StatusOr<nlohmann::json> parsed = parse_json(data, kRequestJsonLimits);
  if (!parsed.is_ok() || !parsed->is_object()) {
    error_ = str("malformed event in the stream: ", truncated(data));
    return;
  }
  const nlohmann::json& j = *parsed;
  if (auto it = j.find("error"); it != j.end() && !it->is_null()) {
    std::string msg;
    error_ = nonempty_string(*it, "message", msg) ? "server error: " + msg
                                                  : "server error: " + truncated(it->dump());
    return;
  }
  if (backend_ == Backend::kSglang) {
    const nlohmann::json meta = j.value("meta_info", nlohmann::json::object());
    std::string text;
    nonempty_string(j, "text", text);  // cumulative
    const int64_t tokens = int_or(meta, "completion_tokens", -1);
    const bool grew = tokens >= 0 ? tokens > std::max<int64_t>(completion_tokens_, 0)
                                  : text.size() > text_.size();
    if (grew) on_text_chunk(t_s);
    if (!text.empty()) text_ = text;
    if (tokens >= 0) completion_tokens_ = tokens;
    prompt_tokens_ = int_or(meta, "prompt_tokens", prompt_tokens_);
    if (auto it = meta.find("finish_reason"); it != meta.end() && !it->is_null()) done_ = true;
    return;
  }
  if (auto it = j.find("choices"); it != j.end() && it->is_array() && !it->empty()) {
    const nlohmann::json& choice = (*it)[0];
    std::string text;
    bool has_text = false;
    if (backend_ == Backend::kOpenAiChat) {
      const nlohmann::json delta = choice.value("delta", nlohmann::json::object());
      std::string reasoning;
      has_text = nonempty_string(delta, "content", text);
      if (nonempty_string(delta, "reasoning_content", reasoning)) has_text = true;
    } else {
      has_text = nonempty_string(choice, "text", text);
    }
    if (first_choice_s_ < 0.0) first_choice_s_ = t_s;
    if (has_text) {
      on_text_chunk(t_s);
      text_ += text;
    }
    if (auto fr = choice.find("finish_reason"); fr != choice.end() && !fr->is_null()) done_ = true;
  }
  if (auto it = j.find("usage"); it != j.end() && it->is_object()) {
    completion_tokens_ = int_or(*it, "completion_tokens", completion_tokens_);
    prompt_tokens_ = int_or(*it, "prompt_tokens", prompt_tokens_);
  }
}

void StreamAccumulator::finish(double end_s, RequestOutcome& out) const {
  out.latency_s = end_s;
  out.ttft_s = num_chunks_ == 0 && first_choice_s_ >= 0.0 ? first_choice_s_ : ttft_s_;
  out.itl_s = itl_s_;
  out.num_chunks = num_chunks_;
  out.generated_text = text_;
  out.usage_reported = completion_tokens_ >= 0;
  out.output_len = completion_tokens_ >= 0 ? completion_tokens_ : num_chunks_;
  out.input_len = prompt_tokens_ >= 0 ? prompt_tokens_ : out.planned_input_len;
  if (!error_.empty()) {
    out.error = error_;
  } else if (num_chunks_ == 0 && !(done_ && completion_tokens_ > 0)) {
    // Tokens whose text is empty (special tokens the detokenizer skips, which dummy weights may
    // repeat for a whole answer) are still generated tokens when the usage counts them: such a
    // stream succeeds, timed from its first chunk.
    out.error = "the stream carried no generated text";
  } else if (!done_) {
    out.error = "the stream ended without [DONE] or a finish_reason";
  }
  out.success = out.error.empty();
  if (!out.success) out.error_kind = "stream error";
}

RequestOutcome send_request(const Endpoint& endpoint, const RequestOptions& options,
                            const RequestSpec& spec, Clock::time_point bench_start) {
  RequestOutcome out;
  out.planned_input_len = spec.planned_input_len;
  out.max_tokens = spec.max_tokens;
  StreamAccumulator acc(options.backend);
  Clock::time_point start;
  double chunk_s = 0.0;
  SseParser parser([&](std::string_view data) { acc.on_event(data, chunk_s); });
  int status = 0;
  std::string error_body;

  HttpCall call = make_call(endpoint, "POST", endpoint.path_prefix + backend_path(options.backend), /*stream=*/true);
  call.headers.emplace_back("Content-Type", "application/json");
  call.body = build_request_body(spec, options).dump();
  auto on_status = [&](int s) { status = s; };
  auto on_data = [&](std::string_view data) {
    chunk_s = seconds_between(start, Clock::now());
    if (status == 200) {
      parser.feed(data);
    } else if (error_body.size() < kMaxErrorBody) {
      error_body.append(data.substr(0, kMaxErrorBody - error_body.size()));
    }
  };
  start = Clock::now();
  out.start_s = seconds_between(bench_start, start);
  const HttpCallResult res = http_call(call, on_status, on_data);
  const double end_s = seconds_between(start, Clock::now());
  chunk_s = end_s;
  parser.finish();
  acc.finish(end_s, out);
  if (status != 0 && status != 200) {
    out.success = false;
    out.error_kind = str("HTTP status ", status);
    out.error = str("HTTP ", status, " from ", call.target, ": ", truncated(error_body, kMaxErrorBody));
  } else if (!res.complete) {
    out.success = false;
    out.error_kind = res.error_kind;
    out.error = res.error;
  }
  return out;
}

StatusOr<std::string> fetch_first_model_id(const Endpoint& endpoint) {
  HttpCall call = make_call(endpoint, "GET", endpoint.path_prefix + "/v1/models", /*stream=*/false);
  call.timeout_s = std::min(call.timeout_s, 30.0);
  int status = 0;
  std::string body;
  const HttpCallResult res =
      http_call(call, [&](int s) { status = s; }, [&](std::string_view data) { body.append(data); });
  const std::string& path = call.target;
  if (status == 0 || (!res.complete && status == 200)) {
    return Status(StatusCode::kUnavailable, res.error);
  }
  if (status != 200) {
    return Status(StatusCode::kUnavailable, str("GET ", path, " returned HTTP ", status, ": ", truncated(body)));
  }
  StatusOr<nlohmann::json> parsed = parse_json(body, kRequestJsonLimits);
  nlohmann::json j = parsed.is_ok() ? std::move(parsed).value() : nlohmann::json();
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() ||
      j["data"].empty() || !j["data"][0].is_object() || !j["data"][0].contains("id") ||
      !j["data"][0]["id"].is_string()) {
    return invalid_argument(str("GET ", path, " returned no model id: ", truncated(body)));
  }
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace rlm::bench
