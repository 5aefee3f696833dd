// Request validation (server/openai_protocol): wrong types of content parts, response_format and
// the other output constraints (regex, ebnf, guided_*, structured_outputs, tool_choice),
// store, metadata, parallel_tool_calls, user, tools entries, logit_bias and an empty model are 400
// errors naming the field; the valid forms still parse. Lenient like vLLM / SGLang: `model` may be
// left out, unknown top-level fields are ignored (and listed), any message role reaches the template.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

namespace rlm {
namespace {

ojson chat(ojson extra = ojson::object()) {
  ojson body = {{"model", "m"}, {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body;
}

// Every JSON type other than the ones listed.
std::vector<ojson> values_other_than(const std::vector<ojson::value_t>& allowed) {
  std::vector<ojson> out;
  for (const ojson& v : {ojson(nullptr), ojson(true), ojson(3), ojson(-2), ojson(1.5), ojson("s"), ojson::array(),
                         ojson::array({1, "x"}), ojson::object(), ojson({{"type", "text"}})}) {
    if (std::find(allowed.begin(), allowed.end(), v.type()) == allowed.end()) out.push_back(v);
  }
  return out;
}

void expect_rejected(const ojson& body, const std::string& param, const std::string& needle) {
  ApiError err;
  err.message.clear();
  auto r = parse_chat_request(body, &err);
  ASSERT_FALSE(r.has_value()) << body.dump();
  EXPECT_EQ(err.http_status, 400) << body.dump();
  EXPECT_EQ(err.type, "invalid_request_error");
  EXPECT_EQ(err.param, param) << body.dump();
  EXPECT_NE(err.message.find(needle), std::string::npos) << err.message << " for " << body.dump();
}

void expect_accepted(const ojson& body) {
  ApiError err;
  auto r = parse_chat_request(body, &err);
  EXPECT_TRUE(r.has_value()) << body.dump() << ": " << err.message;
}

TEST(OpenAiProtocol, ContentPartTypeOfAnyJsonType) {
  for (const ojson& type : values_other_than({})) {
    if (type == "text") continue;
    const ojson parts = ojson::array({{{"type", type}, {"text", "x"}}});
    expect_rejected(chat({{"messages", ojson::array({{{"role", "user"}, {"content", parts}}})}}), "messages",
                    "type 'text'");
  }
  for (const ojson& part : {ojson(1), ojson("text"), ojson::array(), ojson({{"text", "no type"}})}) {
    expect_rejected(chat({{"messages", ojson::array({{{"role", "user"}, {"content", ojson::array({part})}}})}}),
                    "messages", "type 'text'");
  }
  const ojson ok = ojson::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}});
  ApiError err;
  auto r = parse_chat_request(chat({{"messages", ojson::array({{{"role", "user"}, {"content", ok}}})}}), &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_EQ(r->messages[0]["content"], "ab");
}

TEST(OpenAiProtocol, ResponseFormatTypeOfAnyJsonType) {
  for (const ojson& type : values_other_than({})) {
    if (type == "text") continue;
    expect_rejected(chat({{"response_format", {{"type", type}}}}), "response_format", "response_format");
  }
  for (const ojson& rf : values_other_than({ojson::value_t::null})) {
    if (rf == ojson({{"type", "text"}})) continue;
    expect_rejected(chat({{"response_format", rf}}), "response_format", "response_format");
  }
  expect_accepted(chat({{"response_format", {{"type", "json_object"}}}}));
  expect_accepted(chat({{"response_format", {{"type", "text"}}}}));
  // json_schema needs its object; the schema an object, boolean or JSON text; strict a boolean.
  for (const ojson& js : values_other_than({ojson::value_t::object})) {
    expect_rejected(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", js}}}}), "response_format",
                    "'response_format.json_schema'");
  }
  for (const ojson& schema : {ojson(3), ojson("not json"), ojson::array(), ojson("[1]")}) {
    expect_rejected(chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}}}}),
                    "response_format", "JSON schema");
  }
  expect_rejected(
      chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", ojson::object()}, {"strict", 1}}}}}}),
      "response_format", "strict");
}

// What each constraint field becomes; two of them, or one with a tool_choice that constrains, are 400s.
TEST(OpenAiProtocol, OutputConstraints) {
  using grammar::GrammarKind;
  const ojson schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  struct Case {
    ojson extra;
    GrammarKind kind;
    std::string source;
    bool strict;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"response_format", {{"type", "json_object"}}}}, GrammarKind::kJsonObject, "", false, "response_format"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}, {"strict", true}}}}}},
       GrammarKind::kJsonSchema, schema.dump(), true, "response_format"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", schema.dump()}}}}}},
       GrammarKind::kJsonSchema, schema.dump(), false, "response_format"},
      {{{"regex", "[a-z]+"}}, GrammarKind::kRegex, "[a-z]+", false, "regex"},
      {{{"guided_regex", "x"}}, GrammarKind::kRegex, "x", false, "guided_regex"},
      {{{"ebnf", "root ::= \"a\""}}, GrammarKind::kEbnf, "root ::= \"a\"", false, "ebnf"},
      {{{"guided_grammar", "root ::= \"b\""}}, GrammarKind::kEbnf, "root ::= \"b\"", false, "guided_grammar"},
      {{{"guided_json", schema}}, GrammarKind::kJsonSchema, schema.dump(), false, "guided_json"},
      {{{"structured_outputs", {{"json", schema}}}}, GrammarKind::kJsonSchema, schema.dump(), false, "structured_outputs.json"},
      {{{"structured_outputs", {{"regex", "y"}}}}, GrammarKind::kRegex, "y", false, "structured_outputs.regex"},
      {{{"structured_outputs", {{"json_object", true}}}}, GrammarKind::kJsonObject, "", false, "structured_outputs.json_object"},
  };
  for (const Case& c : cases) {
    ApiError err;
    auto r = parse_chat_request(chat(c.extra), &err);
    ASSERT_TRUE(r.has_value()) << c.extra.dump() << ": " << err.message;
    EXPECT_EQ(r->grammar.kind, c.kind) << c.extra.dump();
    EXPECT_EQ(r->grammar.source, c.source) << c.extra.dump();
    EXPECT_EQ(r->grammar.strict, c.strict) << c.extra.dump();
    EXPECT_EQ(r->grammar_field, c.field) << c.extra.dump();
    EXPECT_TRUE(r->ignored_fields.empty()) << c.extra.dump();
    ojson completion = {{"prompt", "hi"}};
    for (auto it = c.extra.begin(); it != c.extra.end(); ++it) completion[it.key()] = it.value();
    auto rc = parse_completion_request(completion, &err);
    ASSERT_TRUE(rc.has_value()) << completion.dump() << ": " << err.message;
    EXPECT_EQ(rc->grammar.kind, c.kind) << completion.dump();
  }
  expect_rejected(chat({{"regex", "a"}, {"ebnf", "root ::= \"a\""}}), "ebnf", "both constrain");
  expect_rejected(chat({{"regex", ""}}), "regex", "non-empty string");
  expect_rejected(chat({{"regex", 3}}), "regex", "non-empty string");
  expect_rejected(chat({{"structured_outputs", {{"choice", ojson::array({"a"})}}}}), "structured_outputs", "unsupported");
  // /generate: SGLang's sampling_params fields.
  ApiError err;
  auto g = parse_generate_request({{"text", "hi"}, {"sampling_params", {{"json_schema", schema.dump()}}}}, &err);
  ASSERT_TRUE(g.has_value()) << err.message;
  EXPECT_EQ(g->grammar.kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(g->grammar.source, schema.dump());
  g = parse_generate_request({{"text", "hi"}, {"sampling_params", {{"regex", "[0-9]"}}}}, &err);
  ASSERT_TRUE(g.has_value()) << err.message;
  EXPECT_EQ(g->grammar.kind, GrammarKind::kRegex);
  EXPECT_FALSE(parse_generate_request({{"text", "hi"}, {"sampling_params", {{"regex", "a"}, {"ebnf", "b"}}}}, &err));
  EXPECT_EQ(err.param, "ebnf");
}

TEST(OpenAiProtocol, ToolChoiceRequiredAndNamed) {
  const ojson tools = ojson::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}});
  ApiError err;
  auto r = parse_chat_request(chat({{"tools", tools}, {"tool_choice", "required"}}), &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_EQ(r->tool_choice, "required");
  r = parse_chat_request(
      chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}), &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_EQ(r->tool_choice, "function");
  EXPECT_EQ(r->tool_choice_function, "get_weather");
  expect_rejected(chat({{"tool_choice", "required"}}), "tool_choice", "needs 'tools'");
  expect_rejected(chat({{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}}),
                  "tool_choice", "not among 'tools'");
  expect_rejected(chat({{"tools", tools}, {"tool_choice", "sometimes"}}), "tool_choice", "must be");
  expect_rejected(chat({{"tools", tools}, {"tool_choice", "required"}, {"response_format", {{"type", "json_object"}}}}),
                  "response_format", "cannot be combined");
}

TEST(OpenAiProtocol, ScalarFieldTypes) {
  for (const ojson& v : values_other_than({ojson::value_t::boolean, ojson::value_t::null})) {
    expect_rejected(chat({{"store", v}}), "store", "'store' must be a boolean");
    expect_rejected(chat({{"parallel_tool_calls", v}}), "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
  }
  for (const ojson& v : values_other_than({ojson::value_t::string, ojson::value_t::null})) {
    expect_rejected(chat({{"user", v}}), "user", "'user' must be a string");
    ApiError err;
    ojson completion = {{"model", "m"}, {"prompt", "hi"}, {"user", v}};
    EXPECT_FALSE(parse_completion_request(completion, &err).has_value()) << v.dump();
    EXPECT_EQ(err.param, "user");
  }
  expect_accepted(chat({{"store", false}, {"parallel_tool_calls", true}, {"user", "u-1"}}));
}

TEST(OpenAiProtocol, Metadata) {
  for (const ojson& v : values_other_than({ojson::value_t::object, ojson::value_t::null})) {
    expect_rejected(chat({{"metadata", v}}), "metadata", "'metadata' must be an object");
  }
  expect_rejected(chat({{"metadata", {{"k", 1}}}}), "metadata", "must be a string");
  expect_rejected(chat({{"metadata", {{"k", nullptr}}}}), "metadata", "must be a string");
  ojson many = ojson::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  expect_rejected(chat({{"metadata", many}}), "metadata", "at most 16");
  many.erase("k16");
  expect_accepted(chat({{"metadata", many}}));
  expect_accepted(chat({{"metadata", ojson::object()}}));
}

TEST(OpenAiProtocol, Tools) {
  const ojson good = {{"type", "function"},
                      {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}};
  expect_accepted(chat({{"tools", ojson::array({good})}}));
  expect_accepted(chat({{"tools", ojson::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}}));
  for (const ojson& v : values_other_than({ojson::value_t::array, ojson::value_t::null})) {
    expect_rejected(chat({{"tools", v}}), "tools", "'tools' must be an array");
  }
  for (const ojson& v : values_other_than({ojson::value_t::object})) {
    expect_rejected(chat({{"tools", ojson::array({good, v})}}), "tools", "'tools[1]' must be an object");
  }
  auto with = [&](const std::string& path, const ojson& v) {
    ojson t = good;
    if (path == "type") t["type"] = v;
    if (path == "function") t["function"] = v;
    if (path == "name") t["function"]["name"] = v;
    if (path == "parameters") t["function"]["parameters"] = v;
    return chat({{"tools", ojson::array({t})}});
  };
  for (const ojson& v : values_other_than({})) {
    expect_rejected(with("type", v), "tools", "'tools[0].type' must be \"function\"");
  }
  expect_rejected(with("type", "retrieval"), "tools", "'tools[0].type' must be \"function\"");
  for (const ojson& v : values_other_than({ojson::value_t::object})) {
    expect_rejected(with("function", v), "tools", "'tools[0].function' must be an object");
  }
  for (const ojson& v : values_other_than({ojson::value_t::string})) {
    expect_rejected(with("name", v), "tools", "'tools[0].function.name' must be a non-empty string");
  }
  expect_rejected(with("name", ""), "tools", "'tools[0].function.name' must be a non-empty string");
  for (const ojson& v : values_other_than({ojson::value_t::object, ojson::value_t::null})) {
    expect_rejected(with("parameters", v), "tools", "'tools[0].function.parameters' must be an object");
  }
  ojson missing = good;
  missing.erase("function");
  expect_rejected(chat({{"tools", ojson::array({missing})}}), "tools", "'tools[0].function' must be an object");
}

TEST(OpenAiProtocol, EmptyModel) {
  expect_rejected(chat({{"model", ""}}), "model", "'model' must be non-empty when given");
  ApiError err;
  EXPECT_FALSE(parse_completion_request({{"model", ""}, {"prompt", "hi"}}, &err).has_value());
  EXPECT_EQ(err.param, "model");
  err = {};
  EXPECT_FALSE(parse_generate_request({{"model", ""}, {"text", "hi"}}, &err).has_value());
  EXPECT_EQ(err.param, "model");
  EXPECT_NE(err.message.find("non-empty"), std::string::npos);
  err = {};
  EXPECT_TRUE(parse_generate_request({{"text", "hi"}}, &err).has_value()) << err.message;  // optional there
}

TEST(OpenAiProtocol, ModelOptionalAndUnknownFieldsIgnored) {
  ojson body = chat({{"frobnicate", 1}, {"x_extra", {{"a", 1}}}});
  body.erase("model");
  ApiError err;
  auto r = parse_chat_request(body, &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_EQ(r->model, "");
  EXPECT_EQ(r->ignored_fields, (std::vector<std::string>{"frobnicate", "x_extra"}));
  auto c = parse_completion_request({{"prompt", "hi"}, {"guided_whatever", true}}, &err);
  ASSERT_TRUE(c.has_value()) << err.message;
  EXPECT_EQ(c->ignored_fields, std::vector<std::string>{"guided_whatever"});
  auto g = parse_generate_request({{"text", "hi"}, {"return_text_in_logprobs", true}}, &err);
  ASSERT_TRUE(g.has_value()) << err.message;
  EXPECT_EQ(g->ignored_fields, std::vector<std::string>{"return_text_in_logprobs"});
  // Known fields keep their checks; nested objects stay strict.
  expect_rejected(chat({{"frobnicate", 1}, {"temperature", "hot"}}), "temperature", "must be a number");
  expect_rejected(chat({{"top_p", 2}}), "top_p", "must be in");
  err = {};
  EXPECT_FALSE(parse_generate_request({{"text", "hi"}, {"sampling_params", {{"max_new_tokenz", 3}}}}, &err));
  EXPECT_EQ(err.param, "max_new_tokenz");
}

TEST(OpenAiProtocol, AnyRoleReachesTheTemplate) {
  ApiError err;
  auto r = parse_chat_request(chat({{"messages", ojson::array({{{"role", "ipython"}, {"content", "x"}}})}}), &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_EQ(r->messages[0]["role"], "ipython");
  for (const ojson& role : values_other_than({ojson::value_t::string})) {
    expect_rejected(chat({{"messages", ojson::array({{{"role", role}, {"content", "x"}}})}}), "messages",
                    "string 'role'");
  }
}

TEST(OpenAiProtocol, LogitBias) {
  ApiError err;
  auto r = parse_chat_request(chat({{"logit_bias", {{"15", 100}, {"0", -100}, {"7", 0.5}}}}), &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  const std::vector<std::pair<int32_t, float>> want = {{15, 100.0f}, {0, -100.0f}, {7, 0.5f}};
  EXPECT_EQ(r->params.logit_bias, want);
  for (const ojson& v : values_other_than({ojson::value_t::object, ojson::value_t::null})) {
    expect_rejected(chat({{"logit_bias", v}}), "logit_bias", "'logit_bias' must be an object");
  }
  for (const char* key : {"-1", "x", "", "1.5", "99999999999", " 1"}) {
    expect_rejected(chat({{"logit_bias", {{key, 1}}}}), "logit_bias", "is not a token id");
  }
  expect_rejected(chat({{"logit_bias", {{"1", 100.5}}}}), "logit_bias", "[-100, 100]");
  expect_rejected(chat({{"logit_bias", {{"1", "5"}}}}), "logit_bias", "must be a number");
  expect_rejected(chat({{"logit_bias", {{"1", 1}, {"01", 2}}}}), "logit_bias", "twice");
  auto c = parse_completion_request({{"prompt", "hi"}, {"logit_bias", {{"3", -5}}}}, &err);
  ASSERT_TRUE(c.has_value()) << err.message;
  EXPECT_EQ(c->params.logit_bias.size(), 1u);
}

TEST(OpenAiProtocol, ContinueFinalMessage) {
  ApiError err;
  auto r = parse_chat_request(chat({{"continue_final_message", true}, {"add_generation_prompt", false}}), &err);
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_TRUE(r->continue_final_message);
  EXPECT_FALSE(r->add_generation_prompt);
  r = parse_chat_request(chat({{"continue_final_message", true}}), &err);  // add_generation_prompt defaults off then
  ASSERT_TRUE(r.has_value()) << err.message;
  EXPECT_FALSE(r->add_generation_prompt);
  expect_rejected(chat({{"continue_final_message", true}, {"add_generation_prompt", true}}), "continue_final_message",
                  "cannot both be true");
  expect_rejected(chat({{"continue_final_message", 1}}), "continue_final_message", "must be a boolean");
}

}  // namespace
}  // namespace rlm
