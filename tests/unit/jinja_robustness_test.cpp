// Mutated real chat templates (seeded byte-level edits) must never crash, hang or throw out of
// the API: parse either fails with a Status or succeeds, and rendering a successful parse returns
// a string or a Status.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/chat_template.h"
#include "unit/jinja_test_util.h"

namespace rlm {
namespace {

TEST(JinjaRobustness, MutatedTemplatesNeverEscapeTheApi) {
  const char* files[] = {"smollm2.jinja", "llama3.1.jinja", "llama3.2.jinja", "qwen2.5.jinja", "qwen3.jinja"};
  const nlohmann::ordered_json conversations = jinja_test::read_json("conversations.json");
  static const std::string kAlphabet[] = {"{", "}", "%", "#", "-", "+", "(", ")", "[", "]", "'", "\"", "\\", "|",
                                          ".", ",", ":", "~", "=", "!", "<", ">", "*", "/", " ", "\n", "x", "0",
                                          "1.5", "if", "for", "endif", "endfor", "in", "is", "not", "and", "or",
                                          "set", "macro", "loop", "none", "é", "🎉", "{{", "}}", "{%", "%}", "{#",
                                          "#}", "[::-1]", "|tojson", "|length", "is defined", "else", "elif"};
  std::mt19937 rng(12345);
  int parsed = 0, rendered = 0, failed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string src = jinja_test::read_file(jinja_test::data_path(files[iter % 5]));
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !src.empty(); ++e) {
      const size_t pos = rng() % src.size();
      switch (rng() % 3) {
        case 0: src.erase(pos, 1 + rng() % 6); break;
        case 1: src.insert(pos, kAlphabet[rng() % std::size(kAlphabet)]); break;
        default: src.replace(pos, 1, kAlphabet[rng() % std::size(kAlphabet)]); break;
      }
    }
    StatusOr<ChatTemplate> ct = ChatTemplate::parse(src, "<s>", "</s>");
    if (!ct.is_ok()) {
      EXPECT_EQ(ct.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(ct.status().message().find("line "), std::string::npos) << ct.status().message();
      continue;
    }
    ++parsed;
    const auto& conv = conversations[rng() % conversations.size()];
    const nlohmann::ordered_json tools = conv.contains("tools") ? conv["tools"] : nlohmann::ordered_json(nullptr);
    StatusOr<std::string> out = ct->render(conv["messages"], conv["add_generation_prompt"].get<bool>(), tools);
    if (out.is_ok()) ++rendered;
    else ++failed;
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rendered, 50);
  std::printf("mutants: %d parsed, %d rendered, %d failed at render\n", parsed, rendered, failed);
}

}  // namespace
}  // namespace rlm
