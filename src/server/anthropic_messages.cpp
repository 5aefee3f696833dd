#include "server/anthropic_messages.h"

#include <set>

#include "server/answer_blocks.h"
#include "server/request_ids.h"

namespace rlm {

namespace {

// Text of a string or of an array of text blocks (joined); false when it is neither.
bool text_of(const ojson& v, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (!v.is_array()) return false;
  out->clear();
  for (const ojson& b : v) {
    if (type_field(b) != "text" || !b.contains("text") || !b["text"].is_string()) return false;
    if (!out->empty()) *out += "\n";
    *out += b["text"].get<std::string>();
  }
  return true;
}

// One Messages message as chat messages: tool_result blocks become tool messages (before the
// user's text), tool_use blocks an assistant message's tool_calls.
bool convert_message(const ojson& m, size_t i, ojson* out, ApiError* err) {
  const std::string where = str("messages[", i, "]");
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    return fail_request(err, "messages", str("'", where, "' must be an object with a string 'role'"));
  }
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant") {
    return fail_request(err, "messages", str("'", where, ".role' must be \"user\" or \"assistant\""));
  }
  if (!m.contains("content") || (!m["content"].is_string() && !m["content"].is_array())) {
    return fail_request(err, "messages", str("'", where, ".content' must be a string or an array of content blocks"));
  }
  if (m["content"].is_string()) {
    out->push_back({{"role", role}, {"content", m["content"]}});
    return true;
  }
  std::string text;
  bool has_text = false;
  ojson calls = ojson::array();
  for (const ojson& b : m["content"]) {
    const std::string type = type_field(b);
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
      has_text = true;
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string() ||
          (b.contains("input") && !b["input"].is_object())) {
        return fail_request(err, "messages", str("'", where, "' tool_use blocks need a string 'id' and 'name' and an object 'input'"));
      }
      const ojson input = b.contains("input") ? b["input"] : ojson::object();
      calls.push_back({{"id", b["id"]},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", python_json_dumps(input)}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string()) {
        return fail_request(err, "messages", str("'", where, "' tool_result blocks need a string 'tool_use_id'"));
      }
      std::string result;
      if (b.contains("content") && !b["content"].is_null() && !text_of(b["content"], &result)) {
        return fail_request(err, "messages", str("'", where, "' tool_result content must be a string or text blocks"));
      }
      out->push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      continue;  // earlier reasoning: chat templates leave it out of the prompt too
    } else {
      return fail_request(err, "messages",
                  str("'", where, "' has a content block of type '", type, "', which is not supported (text, ",
                      role == "user" ? "tool_result" : "tool_use, thinking", ")"));
    }
  }
  if (role == "assistant") {
    // Content "" rather than null beside tool calls: templates (Qwen3's) search the content.
    ojson a = {{"role", "assistant"}, {"content", text}};
    if (!calls.empty()) a["tool_calls"] = calls;
    out->push_back(std::move(a));
  } else if (has_text) {
    out->push_back({{"role", "user"}, {"content", text}});
  }
  return true;
}

// tools: [{"name", "description", "input_schema"}] as chat tools.
bool convert_tools(const ojson& tools, ojson* out, ApiError* err) {
  if (!tools.is_array()) return fail_request(err, "tools", "'tools' must be an array");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string type = type_field(t);
    if (!t.is_object() || (!type.empty() && type != "custom")) {
      return fail_request(err, "tools", str("'tools[", i, "]' must be a custom tool {\"name\", \"input_schema\"}; server tools (",
                                    type, ") are not supported"));
    }
    if (!t.contains("name") || !t["name"].is_string() || t["name"].get_ref<const std::string&>().empty()) {
      return fail_request(err, "tools", str("'tools[", i, "].name' must be a non-empty string"));
    }
    if (!t.contains("input_schema") || !t["input_schema"].is_object()) {
      return fail_request(err, "tools", str("'tools[", i, "].input_schema' must be an object (a JSON schema)"));
    }
    ojson fn = {{"name", t["name"]}};
    if (t.contains("description") && t["description"].is_string()) fn["description"] = t["description"];
    fn["parameters"] = t["input_schema"];
    out->push_back({{"type", "function"}, {"function", fn}});
  }
  return true;
}

// tool_choice {"type": auto|any|tool|none, "name", "disable_parallel_tool_use"} in chat terms.
bool convert_tool_choice(const ojson& tc, ojson* chat, ApiError* err) {
  const std::string type = type_field(tc);
  if (type == "auto" || type == "none") {
    (*chat)["tool_choice"] = type;
  } else if (type == "any") {
    (*chat)["tool_choice"] = "required";
  } else if (type == "tool" && tc.contains("name") && tc["name"].is_string()) {
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  } else {
    return fail_request(err, "tool_choice",
                "'tool_choice' must be {\"type\": \"auto\"}, {\"type\": \"any\"}, {\"type\": \"none\"} or "
                "{\"type\": \"tool\", \"name\": ...}");
  }
  if (tc.contains("disable_parallel_tool_use") && tc["disable_parallel_tool_use"].is_boolean()) {
    (*chat)["parallel_tool_calls"] = !tc["disable_parallel_tool_use"].get<bool>();
  }
  return true;
}

// Chat-request field names in errors, as the Messages request calls them.
std::string messages_param(const std::string& chat_param) {
  if (chat_param == "stop") return "stop_sequences";
  if (chat_param == "chat_template_kwargs") return "thinking";
  return chat_param;
}

class MessagesFormat : public ChatAnswerFormat, private BlockEvents {
 public:
  explicit MessagesFormat(std::string model) : id_(new_request_id("msg_")), model_(std::move(model)) {}

  HttpResponse error(const ApiError& e) const override { return anthropic_error_response(e); }

  ojson response(const ChatResult& r) override {
    ojson content = ojson::array();
    for (const AnswerBlock& b : AnswerBlocks::of(r)) content.push_back(block_json(b, /*start=*/false));
    ojson m = message_json(content);
    m["stop_reason"] = stop_reason(r);
    m["stop_sequence"] = r.finish.matched_stop_str ? ojson(*r.finish.matched_stop_str) : ojson(nullptr);
    m["usage"] = usage(r);
    return m;
  }

  std::string stream_begin(int64_t prompt_tokens) override {
    ojson m = message_json(ojson::array());
    m["stop_reason"] = nullptr;
    m["stop_sequence"] = nullptr;
    m["usage"] = {{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", m}});
  }

  std::string stream_delta(const OutputDelta& d) override {
    blocks_.feed(d, this);
    return std::move(out_);
  }

  std::string stream_end(const ChatResult& r) override {
    blocks_.close(this);
    ojson delta = {{"stop_reason", stop_reason(r)},
                   {"stop_sequence", r.finish.matched_stop_str ? ojson(*r.finish.matched_stop_str) : ojson(nullptr)}};
    out_ += sse_event("message_delta", {{"type", "message_delta"}, {"delta", delta}, {"usage", usage(r)}});
    out_ += sse_event("message_stop", {{"type", "message_stop"}});
    return std::move(out_);
  }

  std::string stream_error(const std::string& message) override {
    return sse_event("error", {{"type", "error"}, {"error", {{"type", "api_error"}, {"message", message}}}});
  }

 private:
  ojson message_json(ojson content) const {
    return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}, {"content", std::move(content)}};
  }

  static std::string stop_reason(const ChatResult& r) {
    if (r.finish.reason == "length") return "max_tokens";
    if (r.finish.matched_stop_str) return "stop_sequence";
    if (!r.view.calls.empty()) return "tool_use";
    return "end_turn";
  }

  static ojson usage(const ChatResult& r) {
    // Anthropic counts prompt tokens read from the cache apart from input_tokens.
    return {{"input_tokens", r.finish.prompt_tokens - r.finish.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", r.finish.cached_tokens},
            {"output_tokens", r.finish.completion_tokens}};
  }

  // A block as a content block (`start`: as content_block_start shows it, before any delta).
  static ojson block_json(const AnswerBlock& b, bool start) {
    switch (b.kind) {
      case BlockKind::kReasoning:
        return {{"type", "thinking"}, {"thinking", start ? "" : b.text}, {"signature", ""}};
      case BlockKind::kText:
        return {{"type", "text"}, {"text", start ? "" : b.text}};
      case BlockKind::kToolCall:
        return {{"type", "tool_use"},
                {"id", b.call_id},
                {"name", b.name},
                {"input", start ? ojson::object() : call_arguments_object(b.text)}};
    }
    return nullptr;
  }

  void opened(size_t index, const AnswerBlock& b) override {
    out_ += sse_event("content_block_start",
                      {{"type", "content_block_start"}, {"index", index}, {"content_block", block_json(b, true)}});
  }
  void appended(size_t index, const AnswerBlock& b, std::string_view piece) override {
    ojson delta;
    switch (b.kind) {
      case BlockKind::kReasoning: delta = {{"type", "thinking_delta"}, {"thinking", piece}}; break;
      case BlockKind::kText: delta = {{"type", "text_delta"}, {"text", piece}}; break;
      case BlockKind::kToolCall: delta = {{"type", "input_json_delta"}, {"partial_json", piece}}; break;
    }
    out_ += sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", delta}});
  }
  void closed(size_t index, const AnswerBlock&) override {
    out_ += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
  }

  std::string id_;
  std::string model_;
  AnswerBlocks blocks_;
  std::string out_;  // events written by the BlockEvents callbacks, handed out by the stream calls
};

}  // namespace

std::optional<ParsedRequest> parse_messages_request(const ojson& body, bool count_only, ApiError* err) {
  if (!body.is_object()) {
    fail_request(err, "", "the request body must be a JSON object");
    return std::nullopt;
  }
  static const std::set<std::string> known = {"model", "messages", "system", "max_tokens", "stop_sequences",
                                              "temperature", "top_p", "top_k", "stream", "metadata", "tools",
                                              "tool_choice", "thinking", "service_tier"};
  ojson chat = ojson::object();
  std::vector<std::string> ignored;
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!known.count(it.key())) ignored.push_back(it.key());
  }
  for (const char* k : {"model", "temperature", "top_p", "top_k", "stream"}) {
    if (body.contains(k)) chat[k] = body[k];
  }
  if (!count_only) {
    if (!body.contains("max_tokens") || body["max_tokens"].is_null()) {
      fail_request(err, "max_tokens", "'max_tokens' is required");
      return std::nullopt;
    }
    chat["max_tokens"] = body["max_tokens"];
  }
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    if (!body["stop_sequences"].is_array()) {
      fail_request(err, "stop_sequences", "'stop_sequences' must be an array of strings");
      return std::nullopt;
    }
    if (!body["stop_sequences"].empty()) chat["stop"] = body["stop_sequences"];
  }
  ojson messages = ojson::array();
  if (body.contains("system") && !body["system"].is_null()) {
    std::string system;
    if (!text_of(body["system"], &system)) {
      fail_request(err, "system", "'system' must be a string or an array of text blocks");
      return std::nullopt;
    }
    messages.push_back({{"role", "system"}, {"content", system}});
  }
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty()) {
    fail_request(err, "messages", "'messages' must be a non-empty array");
    return std::nullopt;
  }
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    if (!convert_message(body["messages"][i], i, &messages, err)) return std::nullopt;
  }
  chat["messages"] = messages;
  if (body.contains("tools") && !body["tools"].is_null()) {
    ojson tools;
    if (!convert_tools(body["tools"], &tools, err)) return std::nullopt;
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null() &&
      !convert_tool_choice(body["tool_choice"], &chat, err)) {
    return std::nullopt;
  }
  if (body.contains("thinking") && !body["thinking"].is_null()) {
    const std::string type = type_field(body["thinking"]);
    if (type != "enabled" && type != "disabled") {
      fail_request(err, "thinking", "'thinking' must be {\"type\": \"enabled\", ...} or {\"type\": \"disabled\"}");
      return std::nullopt;
    }
    chat["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
  }
  std::optional<ParsedRequest> r = parse_chat_request(chat, err);
  if (!r) {
    err->param = messages_param(err->param);
    return std::nullopt;
  }
  r->ignored_fields = std::move(ignored);
  return r;
}

std::shared_ptr<ChatAnswerFormat> messages_format(std::string model) {
  return std::make_shared<MessagesFormat>(std::move(model));
}

HttpResponse anthropic_error_response(const ApiError& e) {
  std::string type = e.type;
  if (e.http_status >= 500) type = e.http_status == 503 ? "overloaded_error" : "api_error";
  HttpResponse r = json_response(e.http_status, {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}});
  return r;
}

}  // namespace rlm
