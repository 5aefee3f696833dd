// tool_choice by constrained decoding (server/tool_grammar): for every tool-call format with JSON
// arguments, random walks through the structural tag (random allowed tokens of SmolLM2's
// vocabulary) give text that the format's own output parser (server/output_parser) reads as
// exactly one call of an allowed tool, with arguments that are a JSON object holding the
// parameters' required keys with values of their types and bounds (checked here with
// nlohmann::json; string lengths in code points); formats without JSON arguments (qwen3_coder,
// pythonic, none) are kInvalidArgument.
#include "server/tool_grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "core/utf8.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace rlm {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["celsius", "fahrenheit"]}},
      "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
      "a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
])");

// Random allowed tokens until the matcher terminates; the text before the stop token.
std::string walk(const Tokenizer& tok, std::shared_ptr<const grammar::CompiledGrammar> g, int64_t vocab, uint64_t seed) {
  grammar::GrammarMatcher m(std::move(g));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> words(static_cast<size_t>(grammar::bitmask_words(vocab))), out, ok;
  for (int step = 0; step < 600 && !m.terminated(); ++step) {
    m.fill_next_token_bitmask(words.data());
    ok.clear();
    for (int64_t t = 0; t < vocab; ++t) {
      if ((static_cast<uint32_t>(words[t / 32]) >> (t % 32)) & 1u) ok.push_back(static_cast<int32_t>(t));
    }
    if (ok.empty()) break;
    const int32_t t = ok[rng() % ok.size()];
    EXPECT_TRUE(m.accept(t));
    if (!m.terminated()) out.push_back(t);
  }
  EXPECT_TRUE(m.terminated()) << tok.decode(out);
  return tok.decode(out);
}

void check_arguments(const std::string& name, const std::string& arguments) {
  const ojson args = ojson::parse(arguments);
  ASSERT_TRUE(args.is_object()) << arguments;
  if (name == "get_weather") {
    ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << arguments;
    EXPECT_LE(utf8::length(args["city"].get<std::string>()), 10u) << arguments;  // maxLength counts code points
    ASSERT_TRUE(args.contains("unit")) << arguments;
    EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << arguments;
  } else {
    ASSERT_EQ(name, "add");
    ASSERT_TRUE(args.contains("a") && args["a"].is_number_integer()) << arguments;
    EXPECT_TRUE(args["a"] >= 0 && args["a"] <= 99) << arguments;
    ASSERT_TRUE(args.contains("b") && args["b"].is_number_integer()) << arguments;
  }
}

TEST(ToolGrammar, WalksParseAsOneValidCall) {
  auto tok = load_tokenizer(std::string(RADIXLM_SOURCE_DIR) + "/tests/data/tokenizer/smollm2/tokenizer.json");
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const int64_t vocab = (*tok)->vocab_size();
  grammar::GrammarCompiler compiler(**tok, vocab, {*(*tok)->token_to_id("<|im_end|>")});
  for (ToolFormat format : {ToolFormat::kHermes, ToolFormat::kLlama3Json, ToolFormat::kMistral}) {
    for (const std::string function : {"", "add", "get_weather"}) {
      StatusOr<std::string> tag = tool_call_structural_tag(format, kTools, function);
      ASSERT_TRUE(tag.is_ok()) << tag.status().to_string();
      auto g = compiler.compile({grammar::GrammarKind::kStructuralTag, *tag, false});
      ASSERT_TRUE(g.is_ok()) << tool_format_name(format) << ": " << g.status().to_string();
      for (uint64_t seed = 0; seed < 4; ++seed) {
        const std::string text = walk(**tok, *g, vocab, seed);
        OutputFormats formats;
        formats.tools = format;
        formats.tool_defs = kTools;
        const OutputView v = read_output(formats, text, /*final=*/true);
        SCOPED_TRACE(str(tool_format_name(format), " '", function, "' seed ", seed, ": ", text));
        ASSERT_EQ(v.calls.size(), 1u);
        EXPECT_TRUE(function.empty() || v.calls[0].name == function);
        check_arguments(v.calls[0].name, v.calls[0].arguments);
        EXPECT_EQ(v.content.find_first_not_of(" \n"), std::string::npos) << "content: " << v.content;
      }
    }
  }
  for (ToolFormat format : {ToolFormat::kQwen3Coder, ToolFormat::kPythonic, ToolFormat::kNone}) {
    StatusOr<std::string> tag = tool_call_structural_tag(format, kTools, "");
    ASSERT_FALSE(tag.is_ok());
    EXPECT_EQ(tag.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace rlm
