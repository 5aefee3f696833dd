// The real chat templates (SmolLM2, Llama-3.1, Llama-3.2, Qwen2.5, Qwen3, plus 22 more from other
// model families in tests/data/chat_templates/extra) rendered over every committed conversation
// must be byte-identical to transformers' render_jinja_template output
// (tests/data/chat_templates/expected.jsonl from tools/make_chat_template_golden.py), including
// the cases where the template raises.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "unit/jinja_test_util.h"

namespace rlm {
namespace {

using jinja_test::error_matches;

TEST(ChatTemplateGolden, MatchesTransformers) {
  const nlohmann::ordered_json templates = jinja_test::read_json("templates.json");
  nlohmann::ordered_json conversations = jinja_test::read_json("conversations.json");
  for (const auto& c : jinja_test::read_json("conversations_random.json")) conversations.push_back(c);
  const std::vector<nlohmann::ordered_json> expected = jinja_test::read_jsonl("expected.jsonl");
  ASSERT_GE(templates.size(), 5u);
  for (const char* core : {"smollm2", "llama3.1", "llama3.2", "qwen2.5", "qwen3"}) {
    EXPECT_TRUE(std::any_of(templates.begin(), templates.end(), [&](const auto& t) { return t["name"] == core; }))
        << core;
  }
  ASSERT_GE(conversations.size(), 80u);
  ASSERT_EQ(expected.size(), templates.size() * conversations.size());

  std::map<std::string, ChatTemplate> parsed;
  for (const auto& t : templates) {
    const std::string source = jinja_test::read_file(jinja_test::data_path(t["file"].get<std::string>()));
    auto token = [&](const char* key) { return t[key].is_null() ? std::string() : t[key].get<std::string>(); };
    StatusOr<ChatTemplate> ct = ChatTemplate::parse(source, token("bos_token"), token("eos_token"));
    ASSERT_TRUE(ct.is_ok()) << t["name"] << ": " << ct.status().to_string();
    ct->set_clock(jinja_test::fixed_now);
    parsed.emplace(t["name"].get<std::string>(), std::move(ct).value());
  }
  std::map<std::string, const nlohmann::ordered_json*> by_name;
  for (const auto& c : conversations) by_name[c["name"].get<std::string>()] = &c;

  int renders = 0, errors = 0;
  for (const auto& want : expected) {
    const std::string tname = want["template"].get<std::string>();
    const std::string cname = want["conversation"].get<std::string>();
    SCOPED_TRACE(tname + " x " + cname);
    const nlohmann::ordered_json& conv = *by_name.at(cname);
    const nlohmann::ordered_json tools = conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json(nullptr);
    const nlohmann::ordered_json extra =
        conv.contains("extra_context") ? conv["extra_context"] : nlohmann::ordered_json(nullptr);
    StatusOr<std::string> out =
        parsed.at(tname).render(conv["messages"], conv["add_generation_prompt"].get<bool>(), tools, extra);
    if (want.contains("output")) {
      if (!out.is_ok()) {
        ADD_FAILURE() << out.status().to_string();
        continue;
      }
      EXPECT_EQ(out.value(), want["output"].get<std::string>());
      ++renders;
    } else {
      if (out.is_ok()) {
        ADD_FAILURE() << "expected " << want["error"] << ", got " << out.value();
        continue;
      }
      EXPECT_TRUE(error_matches(out.status().message(), want["error_type"].get<std::string>(),
                                want["error"].get<std::string>()))
          << "got: " << out.status().message() << "\nwant: " << want["error_type"] << ": " << want["error"];
      ++errors;
    }
  }
  EXPECT_GT(renders, 100);
  EXPECT_GT(errors, 5);
}

}  // namespace
}  // namespace rlm
