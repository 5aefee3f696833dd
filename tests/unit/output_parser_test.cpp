// server/output_parser: model outputs generated here from known calls (names, argument objects)
// in each format are read back as those calls; streamed at every byte boundary, the deltas
// concatenate to the non-streamed answer; reasoning splits off <think>...</think>.
#include "server/output_parser.h"

#include <gtest/gtest.h>

namespace rlm {
namespace {

using ojson = nlohmann::ordered_json;

struct Call {
  std::string name;
  ojson args;
};

const std::vector<Call> kCalls = {{"get_weather", {{"city", "Paris"}, {"unit", "celsius"}}},
                                  {"add", {{"a", 2}, {"b", -3.5}, {"tags", {"x", "y\"z"}}}}};

std::string render(ToolFormat f, const std::vector<Call>& calls) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const ojson obj = {{"name", c.name}, {f == ToolFormat::kLlama3Json ? "parameters" : "arguments", c.args}};
    if (f == ToolFormat::kHermes) out += "<tool_call>\n" + obj.dump() + "\n</tool_call>\n";
    if (f == ToolFormat::kLlama3Json) out += (i ? "; " : "") + obj.dump();
    if (f == ToolFormat::kMistral) out += std::string(i ? ", " : "[TOOL_CALLS][") + obj.dump();
    if (f == ToolFormat::kQwen3Coder) {
      out += "<tool_call>\n<function=" + c.name + ">\n";
      for (auto it = c.args.begin(); it != c.args.end(); ++it) {
        out += "<parameter=" + it.key() + ">\n" + (it->is_string() ? it->get<std::string>() : it->dump()) + "\n</parameter>\n";
      }
      out += "</function>\n</tool_call>\n";
    }
    if (f == ToolFormat::kPythonic) {
      out += std::string(i ? ", " : "[") + c.name + "(";
      int k = 0;
      for (auto it = c.args.begin(); it != c.args.end(); ++it) out += (k++ ? ", " : "") + it.key() + "=" + it->dump();
      out += ")";
    }
  }
  if (f == ToolFormat::kMistral) out += "]";
  if (f == ToolFormat::kPythonic) out += "]";
  return out;
}

// qwen3_coder types parameters by the tool schema.
ojson tool_defs() {
  return ojson::parse(R"([{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "number"}, "tags": {"type": "array"}}}}}])");
}

OutputView non_streamed(const OutputFormats& f, const std::string& text) {
  OutputParser p(f);
  p.feed(text);
  p.finish();
  return p.view();
}

// Every split into two pieces, and byte by byte: the deltas rebuild the non-streamed view.
void expect_split_invariant(const OutputFormats& f, const std::string& text) {
  const OutputView want = non_streamed(f, text);
  auto check = [&](const std::vector<std::string>& pieces, const std::string& what) {
    OutputParser p(f);
    OutputView got;
    auto apply = [&](const OutputDelta& d) {
      got.reasoning += d.reasoning;
      got.content += d.content;
      for (const ToolCallDelta& c : d.calls) {
        if (!c.id.empty()) {
          ASSERT_EQ(c.index, static_cast<int>(got.calls.size())) << what;
          got.calls.push_back({c.name, ""});
        }
        ASSERT_LT(c.index, static_cast<int>(got.calls.size())) << what;
        got.calls[c.index].arguments += c.arguments;
      }
    };
    for (const std::string& piece : pieces) apply(p.feed(piece));
    apply(p.finish());
    EXPECT_EQ(got.reasoning, want.reasoning) << what;
    EXPECT_EQ(got.content, want.content) << what;
    ASSERT_EQ(got.calls.size(), want.calls.size()) << what;
    for (size_t i = 0; i < got.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, want.calls[i].name) << what;
      EXPECT_EQ(got.calls[i].arguments, want.calls[i].arguments) << what;
    }
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    check({text.substr(0, cut), text.substr(cut)}, "split at " + std::to_string(cut));
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  check(bytes, "byte by byte");
}

TEST(OutputParser, EachFormatReadsTheCallsBackAtEverySplit) {
  for (ToolFormat fmt : {ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral, ToolFormat::kQwen3Coder,
                         ToolFormat::kPythonic}) {
    SCOPED_TRACE(tool_format_name(fmt));
    const OutputFormats f{fmt, ReasoningFormat::kNone, tool_defs()};
    const bool prefix_allowed = fmt == ToolFormat::kHermes || fmt == ToolFormat::kMistral || fmt == ToolFormat::kQwen3Coder;
    const std::string text = (prefix_allowed ? "Let me check. " : "") + render(fmt, kCalls);
    const OutputView v = non_streamed(f, text);
    EXPECT_EQ(v.content, prefix_allowed ? "Let me check. " : "");
    ASSERT_EQ(v.calls.size(), kCalls.size()) << text;
    for (size_t i = 0; i < kCalls.size(); ++i) {
      EXPECT_EQ(v.calls[i].name, kCalls[i].name);
      EXPECT_EQ(ojson::parse(v.calls[i].arguments), kCalls[i].args) << v.calls[i].arguments;
    }
    expect_split_invariant(f, text);
    // Plain text (no call) stays content, whole.
    const std::string plain = "The answer is {42} [ok] <b>.";
    EXPECT_EQ(non_streamed(f, plain).content, plain);
    EXPECT_TRUE(non_streamed(f, plain).calls.empty());
    expect_split_invariant(f, plain);
  }
}

TEST(OutputParser, MalformedBlocksStayText) {
  const OutputFormats f{ToolFormat::kHermes, ReasoningFormat::kNone, nullptr};
  const std::string text = "a <tool_call>not json</tool_call> b";
  const OutputView v = non_streamed(f, text);
  EXPECT_TRUE(v.calls.empty());
  EXPECT_EQ(v.content, text);
  expect_split_invariant(f, text);
}

TEST(OutputParser, ReasoningThenToolCall) {
  const std::string call = render(ToolFormat::kHermes, {kCalls[0]});
  for (ReasoningFormat r : {ReasoningFormat::kQwen3, ReasoningFormat::kDeepSeekR1}) {
    const OutputFormats f{ToolFormat::kHermes, r, nullptr};
    const std::string text = "<think>\nI should call a tool.\n</think>\n\n" + call;
    const OutputView v = non_streamed(f, text);
    EXPECT_EQ(v.reasoning, "\nI should call a tool.\n");
    ASSERT_EQ(v.calls.size(), 1u);
    EXPECT_EQ(ojson::parse(v.calls[0].arguments), kCalls[0].args);
    expect_split_invariant(f, text);
  }
  // DeepSeek-R1 starts inside the reasoning (its template opened <think>); Qwen3 without <think> is content.
  const std::string r1 = "thinking...</think>Answer.";
  EXPECT_EQ(non_streamed({ToolFormat::kNone, ReasoningFormat::kDeepSeekR1, nullptr}, r1).reasoning, "thinking...");
  EXPECT_EQ(non_streamed({ToolFormat::kNone, ReasoningFormat::kDeepSeekR1, nullptr}, r1).content, "Answer.");
  EXPECT_EQ(non_streamed({ToolFormat::kNone, ReasoningFormat::kQwen3, nullptr}, "Answer.").content, "Answer.");
  expect_split_invariant({ToolFormat::kNone, ReasoningFormat::kDeepSeekR1, nullptr}, r1);
}

TEST(OutputParser, AutoDetectsFromTheVendoredTemplates) {
  auto read = [](const std::string& name) {
    FILE* f = std::fopen((std::string(RADIXLM_SOURCE_DIR) + "/tests/data/chat_templates/" + name).c_str(), "rb");
    EXPECT_NE(f, nullptr) << name;
    std::string s;
    char buf[4096];
    for (size_t n; f && (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
    if (f) std::fclose(f);
    return s;
  };
  EXPECT_EQ(detect_tool_format(read("qwen3.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format(read("qwen2.5.jinja")), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format(read("llama3.1.jinja")), ToolFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_format(read("smollm2.jinja")), ToolFormat::kNone);
  EXPECT_FALSE(tool_format_from_name("bogus", "").is_ok());
  EXPECT_FALSE(reasoning_format_from_name("bogus").is_ok());
}

}  // namespace
}  // namespace rlm
