#include "server/responses_api.h"

#include <chrono>
#include <set>

#include "server/answer_blocks.h"
#include "server/http_router.h"
#include "server/request_ids.h"

namespace rlm {

namespace {

// A message item's content: a string, or input_text / output_text parts (joined).
bool content_text(const ojson& c, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return true;
  }
  if (!c.is_array()) return false;
  for (const ojson& part : c) {
    const std::string t = type_field(part);
    if ((t != "input_text" && t != "output_text" && t != "text") || !part.contains("text") || !part["text"].is_string()) {
      return false;
    }
    *out += part["text"].get<std::string>();
  }
  return true;
}

// `input` items as chat messages; consecutive function_call items join one assistant message.
bool convert_input(const ojson& input, ojson* messages, ApiError* err) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return true;
  }
  if (!input.is_array() || input.empty()) return fail_request(err, "input", "'input' must be a string or a non-empty array of items");
  bool open_calls = false;  // the last message is an assistant message made of function_call items
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string where = str("input[", i, "]");
    std::string type = type_field(item);
    if (type.empty() && item.is_object() && item.contains("role")) type = "message";
    if (type == "message") {
      if (!item.contains("role") || !item["role"].is_string()) {
        return fail_request(err, "input", str("'", where, ".role' must be a string"));
      }
      std::string role = item["role"].get<std::string>();
      if (role == "developer") role = "system";
      std::string text;
      if (!item.contains("content") || !content_text(item["content"], &text)) {
        return fail_request(err, "input", str("'", where, ".content' must be a string or input_text / output_text parts"));
      }
      messages->push_back({{"role", role}, {"content", text}});
      open_calls = false;
    } else if (type == "function_call") {
      for (const char* k : {"call_id", "name", "arguments"}) {
        if (!item.contains(k) || !item[k].is_string()) {
          return fail_request(err, "input", str("'", where, ".", k, "' must be a string"));
        }
      }
      ojson call = {{"id", item["call_id"]},
                    {"type", "function"},
                    {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      if (!open_calls) {
        // Content "" rather than null: templates (Qwen3's) search the content.
        messages->push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array()}});
        open_calls = true;
      }
      messages->back()["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      std::string output;
      if (!item.contains("call_id") || !item["call_id"].is_string() || !item.contains("output") ||
          !content_text(item["output"], &output)) {
        return fail_request(err, "input", str("'", where, "' needs a string 'call_id' and an 'output' string or text parts"));
      }
      messages->push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
      open_calls = false;
    } else if (type == "reasoning") {
      continue;  // earlier reasoning: chat templates leave it out of the prompt too
    } else {
      return fail_request(err, "input", str("'", where, "' is an item of type '", type,
                                    "', which is not supported (message, function_call, function_call_output)"));
    }
  }
  return true;
}

bool convert_tools(const ojson& tools, ojson* out, ApiError* err) {
  if (!tools.is_array()) return fail_request(err, "tools", "'tools' must be an array");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    if (type_field(t) != "function") {
      return fail_request(err, "tools", str("'tools[", i, "]' is a tool of type '", type_field(t),
                                    "'; only function tools are supported"));
    }
    ojson fn = ojson::object();
    for (const char* k : {"name", "description", "parameters", "strict"}) {
      if (t.contains(k) && !t[k].is_null()) fn[k] = t[k];
    }
    out->push_back({{"type", "function"}, {"function", fn}});
  }
  return true;
}

// Chat's tool_choice for the Responses one ({"type": "function", "name"} names a function).
ojson chat_tool_choice(const ojson& tc) {
  if (type_field(tc) == "function" && tc.contains("name")) return {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  return tc;
}

class ResponsesFormat : public ChatAnswerFormat, private BlockEvents {
 public:
  ResponsesFormat(const ojson& request, std::string model, std::function<int64_t(const std::string&)> count_tokens)
      : id_(new_request_id("resp_")),
        model_(std::move(model)),
        created_(std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()),
        count_tokens_(std::move(count_tokens)) {
    auto field = [&](const char* k, ojson dflt) { return request.contains(k) && !request[k].is_null() ? request[k] : dflt; };
    echo_ = {{"instructions", field("instructions", nullptr)},
             {"max_output_tokens", field("max_output_tokens", nullptr)},
             {"parallel_tool_calls", field("parallel_tool_calls", true)},
             {"previous_response_id", nullptr},
             {"reasoning", field("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
             {"store", false},
             {"temperature", field("temperature", 1.0)},
             {"text", field("text", {{"format", {{"type", "text"}}}})},
             {"tool_choice", field("tool_choice", "auto")},
             {"tools", field("tools", ojson::array())},
             {"top_p", field("top_p", 1.0)},
             {"truncation", "disabled"},
             {"user", field("user", nullptr)},
             {"metadata", field("metadata", ojson::object())}};
  }

  HttpResponse error(const ApiError& e) const override { return error_response(e); }

  ojson response(const ChatResult& r) override {
    ojson output = ojson::array();
    const std::vector<AnswerBlock> blocks = AnswerBlocks::of(r);
    for (size_t i = 0; i < blocks.size(); ++i) output.push_back(item_json(i, blocks[i], /*done=*/true));
    const bool cut = r.finish.reason == "length";
    ojson j = envelope(cut ? "incomplete" : "completed", std::move(output));
    if (cut) j["incomplete_details"] = {{"reason", "max_output_tokens"}};
    int64_t reasoning = 0;
    for (const AnswerBlock& b : blocks) {
      if (b.kind == BlockKind::kReasoning) reasoning += count_tokens_(b.text);
    }
    j["usage"] = {{"input_tokens", r.finish.prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", r.finish.cached_tokens}}},
                  {"output_tokens", r.finish.completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", reasoning}}},
                  {"total_tokens", r.finish.prompt_tokens + r.finish.completion_tokens}};
    return j;
  }

  std::string stream_begin(int64_t) override {
    const ojson j = envelope("in_progress", ojson::array());
    event("response.created", {{"response", j}});
    event("response.in_progress", {{"response", j}});
    return std::move(out_);
  }

  std::string stream_delta(const OutputDelta& d) override {
    blocks_.feed(d, this);
    return std::move(out_);
  }

  std::string stream_end(const ChatResult& r) override {
    blocks_.close(this);
    ojson j = response(r);
    event(j["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", j}});
    return std::move(out_);
  }

  std::string stream_error(const std::string& message) override {
    event("error", {{"code", "internal_error"}, {"message", message}, {"param", nullptr}});
    ojson j = envelope("failed", ojson::array());
    j["error"] = {{"code", "server_error"}, {"message", message}};
    event("response.failed", {{"response", j}});
    return std::move(out_);
  }

 private:
  ojson envelope(const char* status, ojson output) const {
    ojson j = {{"id", id_},           {"object", "response"},  {"created_at", created_},
               {"status", status},    {"error", nullptr},      {"incomplete_details", nullptr},
               {"model", model_},     {"output", std::move(output)}};
    for (auto it = echo_.begin(); it != echo_.end(); ++it) j[it.key()] = it.value();
    j["usage"] = nullptr;
    return j;
  }

  // Output item ids: the response's id with the item's index, so a stream and its final response
  // agree.
  std::string item_id(size_t index, const AnswerBlock& b) const {
    const char* prefix = b.kind == BlockKind::kReasoning ? "rs_" : b.kind == BlockKind::kText ? "msg_" : "fc_";
    return str(prefix, id_.substr(5), "_", index);
  }

  static ojson part_json(const AnswerBlock& b, bool done) {
    if (b.kind == BlockKind::kReasoning) return {{"type", "reasoning_text"}, {"text", done ? b.text : ""}};
    return {{"type", "output_text"}, {"text", done ? b.text : ""}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
  }

  ojson item_json(size_t index, const AnswerBlock& b, bool done) const {
    const char* status = done ? "completed" : "in_progress";
    switch (b.kind) {
      case BlockKind::kReasoning:
        return {{"id", item_id(index, b)},
                {"type", "reasoning"},
                {"summary", ojson::array()},
                {"content", done ? ojson::array({part_json(b, true)}) : ojson::array()},
                {"status", status}};
      case BlockKind::kText:
        return {{"id", item_id(index, b)},
                {"type", "message"},
                {"status", status},
                {"role", "assistant"},
                {"content", done ? ojson::array({part_json(b, true)}) : ojson::array()}};
      case BlockKind::kToolCall:
        return {{"id", item_id(index, b)}, {"type", "function_call"}, {"status", status},
                {"call_id", b.call_id},    {"name", b.name},          {"arguments", done ? b.text : ""}};
    }
    return nullptr;
  }

  void event(const char* type, ojson fields) {
    ojson e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
    out_ += sse_event(type, e);
  }

  void opened(size_t index, const AnswerBlock& b) override {
    event("response.output_item.added", {{"output_index", index}, {"item", item_json(index, b, false)}});
    if (b.kind != BlockKind::kToolCall) {
      event("response.content_part.added", {{"item_id", item_id(index, b)},
                                            {"output_index", index},
                                            {"content_index", 0},
                                            {"part", part_json(b, false)}});
    }
  }

  void appended(size_t index, const AnswerBlock& b, std::string_view piece) override {
    ojson e = {{"item_id", item_id(index, b)}, {"output_index", index}};
    if (b.kind != BlockKind::kToolCall) e["content_index"] = 0;
    e["delta"] = piece;
    if (b.kind == BlockKind::kText) e["logprobs"] = ojson::array();
    event(b.kind == BlockKind::kText        ? "response.output_text.delta"
          : b.kind == BlockKind::kReasoning ? "response.reasoning_text.delta"
                                            : "response.function_call_arguments.delta",
          std::move(e));
  }

  void closed(size_t index, const AnswerBlock& b) override {
    ojson e = {{"item_id", item_id(index, b)}, {"output_index", index}};
    if (b.kind == BlockKind::kToolCall) {
      e["name"] = b.name;
      e["arguments"] = b.text;
      event("response.function_call_arguments.done", std::move(e));
    } else {
      e["content_index"] = 0;
      e["text"] = b.text;
      if (b.kind == BlockKind::kText) e["logprobs"] = ojson::array();
      event(b.kind == BlockKind::kText ? "response.output_text.done" : "response.reasoning_text.done", e);
      e.erase("text");
      e.erase("logprobs");
      e["part"] = part_json(b, true);
      event("response.content_part.done", std::move(e));
    }
    event("response.output_item.done", {{"output_index", index}, {"item", item_json(index, b, true)}});
  }

  std::string id_;
  std::string model_;
  int64_t created_;
  std::function<int64_t(const std::string&)> count_tokens_;
  ojson echo_;  // request fields every response object repeats
  AnswerBlocks blocks_;
  std::string out_;
  int64_t sequence_ = 0;
};

}  // namespace

std::optional<ParsedRequest> parse_responses_request(const ojson& body, ApiError* err) {
  if (!body.is_object()) {
    fail_request(err, "", "the request body must be a JSON object");
    return std::nullopt;
  }
  static const std::set<std::string> known = {
      "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools",
      "tool_choice", "parallel_tool_calls", "text", "store", "previous_response_id", "metadata", "user",
      "reasoning", "truncation", "include", "background", "service_tier", "stream_options"};
  std::vector<std::string> ignored;
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!known.count(it.key())) ignored.push_back(it.key());
  }
  const auto given = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (given("previous_response_id")) {
    fail_request(err, "previous_response_id",
         "'previous_response_id' is not supported: this server does not store responses; send the conversation in "
         "'input'");
    return std::nullopt;
  }
  if (given("background") && body["background"] != false) {
    fail_request(err, "background", "'background' responses are not supported");
    return std::nullopt;
  }
  if (given("store") && !body["store"].is_boolean()) {
    fail_request(err, "store", "'store' must be a boolean");
    return std::nullopt;
  }
  ojson chat = ojson::object();
  for (const char* k : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user", "metadata"}) {
    if (given(k)) chat[k] = body[k];
  }
  if (given("max_output_tokens")) chat["max_tokens"] = body["max_output_tokens"];
  ojson messages = ojson::array();
  if (given("instructions")) {
    if (!body["instructions"].is_string()) {
      fail_request(err, "instructions", "'instructions' must be a string");
      return std::nullopt;
    }
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!given("input")) {
    fail_request(err, "input", "'input' is required");
    return std::nullopt;
  }
  if (!convert_input(body["input"], &messages, err)) return std::nullopt;
  chat["messages"] = messages;
  if (given("tools")) {
    ojson tools;
    if (!convert_tools(body["tools"], &tools, err)) return std::nullopt;
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (given("tool_choice")) chat["tool_choice"] = chat_tool_choice(body["tool_choice"]);
  if (given("text")) {
    const ojson& text = body["text"];
    if (!text.is_object()) {
      fail_request(err, "text", "'text' must be an object");
      return std::nullopt;
    }
    if (text.contains("format") && text["format"].is_object()) {
      ojson rf = text["format"];
      if (type_field(rf) == "json_schema") {  // chat nests the schema one level down
        ojson js = rf;
        js.erase("type");
        rf = {{"type", "json_schema"}, {"json_schema", js}};
      }
      chat["response_format"] = rf;
    }
  }
  std::optional<ParsedRequest> r = parse_chat_request(chat, err);
  if (!r) {
    if (err->param == "max_tokens") err->param = "max_output_tokens";
    if (err->param == "messages") err->param = "input";
    if (err->param == "response_format") err->param = "text";
    return std::nullopt;
  }
  r->ignored_fields = std::move(ignored);
  return r;
}

std::shared_ptr<ChatAnswerFormat> responses_format(const ojson& request, std::string model,
                                                   std::function<int64_t(const std::string&)> count_tokens) {
  return std::make_shared<ResponsesFormat>(request, std::move(model), std::move(count_tokens));
}

}  // namespace rlm
