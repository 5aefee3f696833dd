// Contracts of the interpreter's API that the golden files do not cover: where errors are
// reported (parse time, with line and column), how failures map to Status, guards against
// runaway templates, and ChatTemplate's input validation and variable set-up.
#include <gtest/gtest.h>

#include <ctime>

#include "jinja/interpreter.h"
#include "jinja/template.h"
#include "tokenizer/chat_template.h"
#include "unit/jinja_test_util.h"

namespace rlm {
namespace {

using jinja::Template;
using jinja::Value;

std::string render(const std::string& source, const Value& context = Value::dict()) {
  StatusOr<Template> t = Template::parse(source);
  RLM_CHECK(t.is_ok()) << t.status().to_string();
  StatusOr<std::string> out = t->render(context);
  RLM_CHECK(out.is_ok()) << out.status().to_string();
  return out.value();
}

Status parse_error(const std::string& source) {
  StatusOr<Template> t = Template::parse(source);
  return t.is_ok() ? Status::ok() : t.status();
}

Status render_error(const std::string& source) {
  StatusOr<Template> t = Template::parse(source);
  RLM_CHECK(t.is_ok()) << t.status().to_string();
  StatusOr<std::string> out = t->render(Value::dict());
  return out.is_ok() ? Status::ok() : out.status();
}

TEST(JinjaTemplate, SyntaxErrorsCarryLineAndColumn) {
  Status st = parse_error("{{ x }}\n  {% foo %}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("line 2, column 6"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("unknown tag 'foo'"), std::string::npos) << st.message();

  st = parse_error("ab\ncd {{ x | nosuch }}");
  EXPECT_NE(st.message().find("line 2, column 11"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No filter named 'nosuch'"), std::string::npos) << st.message();
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaTemplate, UnsupportedSyntaxFailsAtParseTime) {
  const std::string sources[] = {
      "{% extends 'base.html' %}",
      "x\n{% include 'other.html' %}",
      "{% import 'macros.html' as m %}",
      "{% from 'm.html' import f %}",
      "{% block body %}{% endblock %}",
      "{% do xs.append(1) %}",
      "{% for x in xs recursive %}{{ loop(x) }}{% endfor %}",
      "{{ f(*args) }}",
      "{% break %}",
      "{{ x[1:2, 3] }}",
      "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}",
      repeat("{% if x %}", 300),
      "{% if x is nosuchtest %}{% endif %}",
  };
  for (const std::string& src : sources) {
    Status st = parse_error(src);
    EXPECT_FALSE(st.is_ok()) << src;
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << src;
    EXPECT_NE(st.message().find("line "), std::string::npos) << src << " -> " << st.message();
  }
}

TEST(JinjaTemplate, RaiseExceptionIsTheStatusMessage) {
  Status st = render_error("ok{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(JinjaTemplate, RuntimeErrorsNameTheTemplateLine) {
  Status st = render_error("a\n{% if true %}\n{{ x.y }}{% endif %}");
  EXPECT_EQ(st.message(), "UndefinedError: 'x' is undefined (template line 3)");
}

TEST(JinjaTemplate, RunawayTemplatesFailCleanly) {
  Status st = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(st.message().find("recursion"), std::string::npos) << st.message();
  st = render_error("{% for i in range(1000000) %}{% endfor %}");
  EXPECT_NE(st.message().find("SecurityError: Range too big"), std::string::npos) << st.message();
}

// A macro needs the scope it was defined in, and that scope stores the macro: held strongly, that
// is a reference cycle, and every render of a template with a macro leaked its scopes. Every scope
// of a render is gone when it returns, wherever macros were defined: at the top level, in a loop
// body (and stored in a namespace), in a macro body, for a call block.
TEST(JinjaTemplate, RenderLeavesNoScopeBehind) {
  const int64_t before = jinja::Scope::live_count();
  const std::string out = render(
      "{% macro greet(n) %}{% macro inner() %}!{% endmacro %}hi {{ n }}{{ inner() }}{{ caller() if caller }}"
      "{% endmacro %}{% set g = 'G' %}{% set ns = namespace(f=none) %}"
      "{% for i in [1, 2] %}{% macro m(x) %}<{{ g }}{{ x }}>{% endmacro %}{% set ns.f = m %}{% endfor %}"
      "{{ greet('a') }} {% call greet('b') %}c{% endcall %} {{ ns.f(3) }}");
  EXPECT_FALSE(out.empty());  // what it renders: feature case macro_scopes (jinja2's output)
  EXPECT_EQ(jinja::Scope::live_count(), before) << "scopes leaked by a render";
}

TEST(JinjaTemplate, IntegerOverflowIsAnErrorNotAWrap) {
  Status st = render_error("{{ 9223372036854775807 + 1 }}");
  EXPECT_NE(st.message().find("integer overflow"), std::string::npos) << st.message();
  st = render_error("{{ 3 ** 100 }}");
  EXPECT_NE(st.message().find("integer overflow"), std::string::npos) << st.message();
  const ChatTemplate ct = [] {
    StatusOr<ChatTemplate> t = ChatTemplate::parse("{{ messages[0].n }}", "", "");
    RLM_CHECK(t.is_ok());
    return std::move(t).value();
  }();
  StatusOr<std::string> out = ct.render(nlohmann::json::parse(R"([{"n": 18446744073709551615}])"), false);
  ASSERT_FALSE(out.is_ok());
  EXPECT_NE(out.status().message().find("does not fit in 64 bits"), std::string::npos) << out.status().message();
}

TEST(JinjaTemplate, ContextMustBeADict) {
  StatusOr<Template> t = Template::parse("x");
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE(t->render(Value::list()).is_ok());
}

TEST(JinjaTemplate, DefaultClockIsTheCurrentYear) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), std::to_string(tm.tm_year + 1900));
}

ChatTemplate smollm2() {
  const std::string source = jinja_test::read_file(jinja_test::data_path("smollm2.jinja"));
  StatusOr<ChatTemplate> ct = ChatTemplate::parse(source, "<|im_start|>", "<|im_end|>");
  RLM_CHECK(ct.is_ok()) << ct.status().to_string();
  return std::move(ct).value();
}

TEST(ChatTemplate, RejectsMalformedInputs) {
  const ChatTemplate ct = smollm2();
  EXPECT_FALSE(ct.render(nlohmann::json::object(), true).is_ok());
  EXPECT_FALSE(ct.render(nlohmann::json::array({"not an object"}), true).is_ok());
  const nlohmann::json msgs = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_FALSE(ct.render(msgs, true, nlohmann::json::object()).is_ok());
  Status st = ct.render(msgs, true, nullptr, {{"messages", 1}}).status();
  EXPECT_NE(st.message().find("may not set 'messages'"), std::string::npos) << st.message();
  EXPECT_FALSE(ChatTemplate::parse("{% if %}", "", "").is_ok());
}

TEST(ChatTemplate, PlainAndOrderedJsonAgreeWhenKeyOrderIsInvisible) {
  const ChatTemplate ct = smollm2();
  const std::string text = R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])";
  StatusOr<std::string> a = ct.render(nlohmann::json::parse(text), true);
  StatusOr<std::string> b = ct.render(nlohmann::ordered_json::parse(text), true);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a.value(), b.value());
}

TEST(ChatTemplate, FromTokenizerConfig) {
  const std::string qwen3 = jinja_test::read_file(jinja_test::data_path("qwen3.jinja"));
  nlohmann::json config = {{"chat_template", qwen3}, {"bos_token", nullptr}, {"eos_token", "<|im_end|>"}};
  StatusOr<ChatTemplate> ct = ChatTemplate::from_tokenizer_config(config);
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  EXPECT_EQ(ct->source(), qwen3);

  // Named templates (e.g. Hermes' "default" / "tool_use") and AddedToken-style special tokens.
  nlohmann::json named = {
      {"chat_template", nlohmann::json::array({{{"name", "default"}, {"template", "D{{ bos_token }}{{ eos_token }}"}},
                                               {{"name", "tool_use"}, {"template", "T{{ bos_token }}"}}})},
      {"bos_token", {{"content", "<s>"}, {"lstrip", false}}},
      {"eos_token", "</s>"}};
  const nlohmann::json no_messages = nlohmann::json::array();
  StatusOr<ChatTemplate> d = ChatTemplate::from_tokenizer_config(named);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->render(no_messages, false).value(), "D<s></s>");
  StatusOr<ChatTemplate> t = ChatTemplate::from_tokenizer_config(named, "tool_use");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->render(no_messages, false).value(), "T<s>");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(named, "rag").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(nlohmann::json::object()).status().code(), StatusCode::kNotFound);
}

TEST(ChatTemplate, EmptySpecialTokenIsUndefined) {
  StatusOr<ChatTemplate> with = ChatTemplate::parse("{{ bos_token is defined }}{{ eos_token }}", "<s>", "</s>");
  StatusOr<ChatTemplate> without = ChatTemplate::parse("{{ bos_token is defined }}{{ eos_token }}", "", "</s>");
  ASSERT_TRUE(with.is_ok() && without.is_ok());
  const nlohmann::json msgs = nlohmann::json::array();
  EXPECT_EQ(with->render(msgs, false).value(), "True</s>");
  EXPECT_EQ(without->render(msgs, false).value(), "False</s>");
}

}  // namespace
}  // namespace rlm
