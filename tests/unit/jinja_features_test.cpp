// Every jinja feature the interpreter supports, one small template each, compared with what
// Python jinja2 (in transformers' chat-template environment) produced for the same template and
// context: tests/data/chat_templates/feature_cases.json -> feature_expected.jsonl, written by
// tools/make_chat_template_golden.py.
#include <gtest/gtest.h>

#include "jinja/template.h"
#include "unit/jinja_test_util.h"

namespace rlm {
namespace {

using jinja_test::error_matches;

TEST(JinjaFeatures, MatchPythonJinja2) {
  const nlohmann::ordered_json cases = jinja_test::read_json("feature_cases.json");
  const std::vector<nlohmann::ordered_json> expected = jinja_test::read_jsonl("feature_expected.jsonl");
  ASSERT_GE(cases.size(), 90u);
  ASSERT_EQ(cases.size(), expected.size());
  jinja::RenderOptions options;
  options.now = jinja_test::fixed_now;
  int checked = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto& want = expected[i];
    const std::string name = c["name"].get<std::string>();
    SCOPED_TRACE("case " + name + ": " + c["template"].get<std::string>());
    ASSERT_EQ(want["name"].get<std::string>(), name);
    StatusOr<jinja::Template> t = jinja::Template::parse(c["template"].get<std::string>());
    const std::string error = want.value("error", "");
    const bool unknown_name = (error.rfind("No test named", 0) == 0 || error.rfind("No filter named", 0) == 0) &&
                              error.find("found.") != std::string::npos;
    if (want.value("phase", "") == "parse" || unknown_name) {
      // jinja2 checks unknown tests inside `if` only when evaluated; we reject them at load.
      ASSERT_FALSE(t.is_ok()) << "expected a syntax error: " << error;
      if (want.contains("lineno") && !want["lineno"].is_null()) {
        const std::string line = "line " + std::to_string(want["lineno"].get<int>()) + ",";
        EXPECT_NE(t.status().message().find(line), std::string::npos)
            << t.status().message() << " (jinja2: line " << want["lineno"] << ": " << error << ")";
      }
      ++checked;
      continue;
    }
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    StatusOr<std::string> out = t->render(jinja::from_json(c["context"]), options);
    if (want.contains("output")) {
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      EXPECT_EQ(out.value(), want["output"].get<std::string>());
    } else {
      ASSERT_FALSE(out.is_ok()) << "expected " << want["error_type"] << ": " << error << ", got output "
                                << out.value();
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      EXPECT_TRUE(error_matches(out.status().message(), want["error_type"].get<std::string>(), error))
          << "got: " << out.status().message() << "\nwant: " << want["error_type"] << ": " << error;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

}  // namespace
}  // namespace rlm
