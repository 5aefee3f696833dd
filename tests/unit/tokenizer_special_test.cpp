// Special/added tokens, bos/eos from tokenizer_config.json, the invalid-UTF-8 policy and clear
// errors for malformed tokenizer files.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/utf8.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "unit/tokenizer_test_util.h"

namespace rlm {
namespace {

using nlohmann::json;

bool contains(const std::vector<int32_t>& v, int32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); }

std::unique_ptr<Tokenizer> load(const std::string& rel) {
  auto t = load_tokenizer(test::tokenizer_data(rel));
  RLM_CHECK(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

TEST(TokenizerSpecial, SpecialStringsBecomeTokensOnlyWhenAllowed) {
  auto tok = load("smollm2");  // a directory: picks tokenizer.json
  const int32_t start = tok->token_to_id("<|im_start|>").value();
  const int32_t end = tok->token_to_id("<|im_end|>").value();
  EXPECT_TRUE(tok->is_special(start));
  const std::string text = "<|im_start|>user\nHi there<|im_end|>\n";
  const auto allowed = tok->encode(text, false, true);
  EXPECT_EQ(allowed.front(), start);
  EXPECT_TRUE(contains(allowed, end));
  const auto plain = tok->encode(text, false, false);
  EXPECT_FALSE(contains(plain, start));
  EXPECT_FALSE(contains(plain, end));
  // Both round-trip to the text; skipping specials drops exactly the special tokens.
  EXPECT_EQ(tok->decode(allowed), text);
  EXPECT_EQ(tok->decode(plain), text);
  EXPECT_EQ(tok->decode(plain, true), text);
  EXPECT_EQ(tok->decode(allowed, true), "user\nHi there\n");
  // The default encode allows special tokens, like Hugging Face.
  EXPECT_EQ(tok->encode(text, false), allowed);
}

TEST(TokenizerSpecial, NonSpecialAddedTokensAreAlwaysMatched) {
  const test::Fixture qwen{"qwen3", "generated/qwen3/tokenizer.json", true};
  if (!test::fixture_available(qwen)) GTEST_SKIP() << "qwen3 fixture not generated";
  auto tok = load(qwen.tokenizer);
  const int32_t think = tok->token_to_id("<think>").value();
  EXPECT_FALSE(tok->is_special(think));
  const auto ids = tok->encode("<think>\nok</think>", false, /*allow_special=*/false);
  EXPECT_EQ(ids.front(), think);
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "<think>\nok</think>");
  EXPECT_EQ(tok->eos_id(), tok->token_to_id("<|im_end|>"));
  EXPECT_FALSE(tok->bos_id().has_value());
}

TEST(TokenizerSpecial, BosAndEosFromConfig) {
  auto smol = load("smollm2/tokenizer.json");
  EXPECT_EQ(smol->bos_id(), smol->token_to_id("<|im_start|>"));
  EXPECT_EQ(smol->eos_id(), smol->token_to_id("<|im_end|>"));
  // SmolLM2's post-processor adds nothing.
  EXPECT_EQ(smol->encode("Hello", true), smol->encode("Hello", false));

  // add_bos_token / add_eos_token apply where the post-processor does not add them already.
  const json tj = test::read_json_file(test::tokenizer_data("smollm2/tokenizer.json"));
  const json config = {{"bos_token", "<|endoftext|>"}, {"eos_token", {{"content", "<|im_end|>"}}},
                       {"add_bos_token", true}, {"add_eos_token", true}};
  auto tok = HfTokenizer::from_json(tj, config);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  auto body = (*tok)->encode("Hello world", false);
  std::vector<int32_t> want{(*tok)->token_to_id("<|endoftext|>").value()};
  want.insert(want.end(), body.begin(), body.end());
  want.push_back((*tok)->token_to_id("<|im_end|>").value());
  EXPECT_EQ((*tok)->encode("Hello world", true), want);

  auto llama = test::fixture_available({"llama3", "generated/llama3/tokenizer.json", true})
                   ? load("generated/llama3/tokenizer.json") : nullptr;
  if (llama) {  // TemplateProcessing already adds bos: config add_bos_token must not double it
    const auto ids = llama->encode("Hi", true);
    EXPECT_EQ(ids.front(), llama->bos_id().value());
    EXPECT_NE(ids[1], llama->bos_id().value());
  }
}

TEST(TokenizerSpecial, SentencePieceControlTokens) {
  auto tok = load("mistral_v1/tokenizer.model");
  EXPECT_EQ(tok->bos_id(), 1);  // the model's own bos_id
  EXPECT_TRUE(tok->is_special(tok->bos_id().value()));
  const auto ids = tok->encode("Hello", true);
  EXPECT_EQ(ids.front(), tok->bos_id().value());
  EXPECT_EQ(tok->decode(ids, false), "<s> Hello");
  EXPECT_EQ(tok->decode(ids, true), "Hello");
  EXPECT_EQ(tok->token_to_id("definitely-not-a-piece"), std::nullopt);
  EXPECT_EQ(tok->id_to_token(tok->vocab_size()), std::nullopt);
}

// Invalid UTF-8 is replaced like Python's bytes.decode(errors="replace"): the reference decode
// of the lossless SmolLM2 tokenizer on the corpus's invalid lines is exactly that string.
TEST(TokenizerSpecial, InvalidUtf8IsReplacedLikePython) {
  const auto lines = test::corpus_lines();
  const auto refs = test::read_jsonl(test::tokenizer_data("smollm2.ref.jsonl"));
  ASSERT_EQ(lines.size(), refs.size());
  int invalid = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (utf8::is_valid(lines[i])) continue;
    ++invalid;
    EXPECT_EQ(utf8::sanitize(lines[i]), refs[i]["decode"].get<std::string>()) << "line " << i + 1;
  }
  EXPECT_GE(invalid, 100);
}

// Long inputs (one 60k-character word, a 20k-space run, the whole corpus as one text) go through
// the heap-based merge loop and the regexes in reasonable time and round-trip exactly through a
// lossless byte-level tokenizer.
TEST(TokenizerSpecial, LongInputsRoundTrip) {
  // SmolLM2's vocabulary with the GPT-2 regex and with the Llama-3 Split regex.
  json tj = test::read_json_file(test::tokenizer_data("smollm2/tokenizer.json"));
  tj["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})");
  auto llama_split = HfTokenizer::from_json(tj, json());
  ASSERT_TRUE(llama_split.is_ok()) << llama_split.status().to_string();
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(load("smollm2/tokenizer.json"));
  toks.push_back(std::move(llama_split).value());
  std::string all;
  for (const std::string& line : test::corpus_lines()) all += utf8::sanitize(line) + "\n";
  std::string crlf, mixed;
  for (int i = 0; i < 50000; ++i) crlf += "\r\n";
  for (int i = 0; i < 30000; ++i) mixed += " \n\t";
  const std::vector<std::string> inputs = {std::string(60000, 'a'), "x" + std::string(20000, ' ') + "y",
                                           std::string(5000, '\t') + "\n\n", std::string(200000, '!'),
                                           crlf + "x", mixed + "y", all};
  for (const auto& tok : toks) {
    for (const std::string& text : inputs) {
      const auto ids = tok->encode(text, false);
      EXPECT_EQ(tok->decode(ids), text) << "input of " << text.size() << " bytes";
    }
  }
}

// A loaded tokenizer is shared by the server's threads: concurrent encodes (which share the BPE
// word cache) give the single-threaded ids.
TEST(TokenizerSpecial, ConcurrentEncodesAgree) {
  auto tok = load("smollm2/tokenizer.json");
  const auto lines = test::corpus_lines();
  std::vector<std::vector<int32_t>> want;
  for (const auto& line : lines) want.push_back(tok->encode(line, true));
  auto fresh = load("smollm2/tokenizer.json");  // empty cache: threads race to fill it
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t]() {
      for (size_t i = t; i < lines.size() * 2; i += 3) {
        const size_t k = (i * 7919) % lines.size();
        if (fresh->encode(lines[k], true) != want[k]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

class MalformedTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rlm_tok_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  // A minimal valid byte-level BPE tokenizer.json, to be broken by each test.
  static json minimal() {
    return json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
                          "pre_tokenizer": null, "decoder": null, "added_tokens": []})");
  }
  void expect_error(const json& tj, StatusCode code, const std::string& needle) {
    auto t = load_tokenizer(write("tokenizer.json", tj.dump()));
    ASSERT_FALSE(t.is_ok());
    EXPECT_EQ(t.status().code(), code) << t.status().to_string();
    EXPECT_NE(t.status().message().find(needle), std::string::npos) << t.status().to_string();
  }
  std::filesystem::path dir_;
};

TEST_F(MalformedTokenizer, MinimalIsValid) {
  auto t = load_tokenizer(write("tokenizer.json", minimal().dump()));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abab", false), (std::vector<int32_t>{2, 2}));  // one word, merged pairwise
}

TEST_F(MalformedTokenizer, BadJson) {
  auto t = load_tokenizer(write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", "));
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("malformed JSON"), std::string::npos) << t.status().to_string();
}

TEST_F(MalformedTokenizer, UnknownModelType) {
  json tj = minimal();
  tj["model"]["type"] = "Unigram";
  expect_error(tj, StatusCode::kUnimplemented, "Unigram");
}

TEST_F(MalformedTokenizer, MissingVocab) {
  json tj = minimal();
  tj["model"].erase("vocab");
  expect_error(tj, StatusCode::kInvalidArgument, "vocab");
}

TEST_F(MalformedTokenizer, MergeOfUnknownTokens) {
  json tj = minimal();
  tj["model"]["merges"].push_back({"b", "zz"});
  expect_error(tj, StatusCode::kInvalidArgument, "b zz");
}

TEST_F(MalformedTokenizer, UnknownPreTokenizerAndBadRegex) {
  json tj = minimal();
  tj["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  expect_error(tj, StatusCode::kUnimplemented, "UnicodeScripts");
  tj["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_error(tj, StatusCode::kInvalidArgument, "(unclosed");
}

TEST_F(MalformedTokenizer, BadAddedTokens) {
  json tj = minimal();
  tj["added_tokens"] = json::array({{{"content", "<x>"}}});
  expect_error(tj, StatusCode::kInvalidArgument, "added token");
}

TEST_F(MalformedTokenizer, MissingFilesAndUnknownFormats) {
  auto missing = load_tokenizer((dir_ / "nope.json").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto empty_dir = load_tokenizer(dir_.string());
  EXPECT_EQ(empty_dir.status().code(), StatusCode::kNotFound);
  EXPECT_NE(empty_dir.status().message().find("tokenizer.json"), std::string::npos);
  auto garbage_spm = load_tokenizer(write("tokenizer.model", "not a protobuf at all"));
  ASSERT_FALSE(garbage_spm.is_ok());
  EXPECT_NE(garbage_spm.status().message().find("SentencePiece"), std::string::npos);
  auto unknown = load_tokenizer(write("vocab.txt", "a\nb\n"));
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace rlm
