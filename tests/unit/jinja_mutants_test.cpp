// Differential test against jinja2 on 1500 seeded random edits of the core chat templates
// (tests/data/chat_templates/mutants.jsonl from tools/make_chat_template_golden.py): the same
// templates must be rejected at load with the same line number, and the accepted ones must
// render to the same bytes (length + FNV-1a 64) or fail with the same error. The one deliberate
// difference: a misspelled filter/test inside an `if` branch that never runs is a load error here
// (jinja2 only fails if the branch executes).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "core/utf8.h"
#include "jinja/template.h"
#include "unit/jinja_test_util.h"

namespace rlm {
namespace {

std::string fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Applies [code point position, delete count, inserted text] edits in order.
std::string apply_edits(const std::string& source, const nlohmann::ordered_json& edits) {
  std::u32string cps = utf8::decode(source);
  for (const auto& e : edits) {
    const size_t pos = e[0].get<size_t>();
    const size_t del = e[1].get<size_t>();
    cps.replace(pos, std::min(del, cps.size() - pos), utf8::decode(e[2].get<std::string>()));
  }
  return utf8::encode(cps);
}

TEST(JinjaMutants, AgreeWithJinja2) {
  const std::vector<nlohmann::ordered_json> mutants = jinja_test::read_jsonl("mutants.jsonl");
  ASSERT_GE(mutants.size(), 1000u);
  std::map<std::string, nlohmann::ordered_json> conversations;
  for (const auto& c : jinja_test::read_json("conversations.json")) conversations[c["name"].get<std::string>()] = c;
  jinja::RenderOptions options;
  options.now = jinja_test::fixed_now;
  int syntax_errors = 0, renders = 0, render_errors = 0, unknown_in_untaken_branch = 0;
  for (const auto& m : mutants) {
    const std::string name = m["name"].get<std::string>();
    const std::string src = apply_edits(jinja_test::read_file(jinja_test::data_path(m["base"].get<std::string>())), m["edits"]);
    SCOPED_TRACE(name);
    const std::string error = m.value("error", "");
    StatusOr<jinja::Template> t = jinja::Template::parse(src);
    // jinja2 defers unknown tests/filters inside `if` to render time; we reject them at load.
    // (A test/filter named by a string, as in select('eqlto'), is only known at render time on
    // both sides.)
    const bool unknown_name = (error.rfind("No test named", 0) == 0 || error.rfind("No filter named", 0) == 0) &&
                              error.find("found.") != std::string::npos;
    if (m.value("phase", "") == "parse" || unknown_name) {
      if (t.is_ok()) {
        ADD_FAILURE() << "jinja2 rejects this template: " << error;
        continue;
      }
      if (m.contains("lineno")) {
        const std::string line = "line " + std::to_string(m["lineno"].get<int>()) + ",";
        EXPECT_NE(t.status().message().find(line), std::string::npos)
            << t.status().message() << " (jinja2: line " << m["lineno"] << ": " << error << ")";
      }
      ++syntax_errors;
      continue;
    }
    if (!t.is_ok()) {
      // Deliberate: an unknown filter/test in a branch jinja2 never runs is still a load error here.
      const std::string& msg = t.status().message();
      if (msg.find("No test named") != std::string::npos || msg.find("No filter named") != std::string::npos) {
        ++unknown_in_untaken_branch;
        continue;
      }
      ADD_FAILURE() << "jinja2 accepts this template, we reject it: " << msg;
      continue;
    }
    const auto& conv = conversations.at(m["conversation"].get<std::string>());
    const jinja::Value context = jinja::from_json(nlohmann::ordered_json{
        {"messages", conv["messages"]},
        {"tools", conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json(nullptr)},
        {"documents", nullptr},
        {"add_generation_prompt", conv["add_generation_prompt"]},
        {"bos_token", "<s>"},
        {"eos_token", "</s>"}});
    StatusOr<std::string> out = t->render(context, options);
    if (m.contains("output_fnv1a64")) {
      if (!out.is_ok()) {
        ADD_FAILURE() << out.status().to_string();
        continue;
      }
      EXPECT_EQ(out->size(), m["output_len"].get<size_t>());
      EXPECT_EQ(fnv1a64(out.value()), m["output_fnv1a64"].get<std::string>());
      ++renders;
    } else {
      if (out.is_ok()) {
        ADD_FAILURE() << "jinja2 raised " << m["error_type"] << ": " << error;
        continue;
      }
      EXPECT_TRUE(jinja_test::error_matches(out.status().message(), m["error_type"].get<std::string>(), error))
          << "got: " << out.status().message() << "\nwant: " << m["error_type"] << ": " << error;
      ++render_errors;
    }
  }
  EXPECT_GT(syntax_errors, 200);
  EXPECT_GT(renders, 200);
  EXPECT_GT(render_errors, 20);
  EXPECT_LT(unknown_in_untaken_branch, 20);
}

}  // namespace
}  // namespace rlm
