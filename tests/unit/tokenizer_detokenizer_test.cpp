// IncrementalDetokenizer over every fixture vocabulary: random id sequences and encoded corpus
// lines, with and without skip_special_tokens. The reference is the tokenizer's own full
// decode (itself checked against Hugging Face by tokenizer_parity_test).
#include <gtest/gtest.h>

#include <random>

#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/incremental_detokenizer.h"
#include "unit/tokenizer_test_util.h"

namespace rlm {
namespace {

class Detokenizer : public ::testing::TestWithParam<test::Fixture> {
 protected:
  void SetUp() override {
    if (!test::fixture_available(GetParam())) GTEST_SKIP() << GetParam().tokenizer << " not generated";
    auto t = test::load_fixture(GetParam());
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tok_ = std::move(t).value();
  }

  // Streams `ids` (after `prompt`) and checks the pieces against the full decode.
  void check_stream(const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids, bool skip) {
    IncrementalDetokenizer detok(*tok_, skip, prompt);
    std::string streamed, rest;
    try {
      for (int32_t id : ids) {
        const std::string piece = detok.push(id);
        ASSERT_TRUE(utf8::is_valid(piece)) << "piece is not whole UTF-8 characters";
        streamed += piece;
      }
      rest = detok.finish();
    } catch (const Error& e) {
      FAIL() << e.what() << "\n ids " << ::testing::PrintToString(ids) << " skip=" << skip;
    }
    ASSERT_TRUE(utf8::is_valid(rest));
    streamed += rest;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), ids.begin(), ids.end());
    std::string want = tok_->decode(all, skip);
    const std::string prompt_text = tok_->decode(prompt, skip);
    ASSERT_EQ(want.compare(0, prompt_text.size(), prompt_text), 0);
    want.erase(0, prompt_text.size());
    ASSERT_EQ(streamed, want) << "ids " << ::testing::PrintToString(ids) << " skip=" << skip;
    ASSERT_EQ(detok.text(), want);
  }

  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(Detokenizer, RandomIdSequencesMatchFullDecode) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_id(0, tok_->vocab_size() - 1);
  // Byte-fallback pieces and special tokens are rare among uniform ids: bias towards them.
  std::vector<int32_t> interesting;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = tok_->token_to_id(name)) interesting.push_back(*id);
  }
  for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
    if (tok_->is_special(id)) interesting.push_back(id);
  }
  for (int seq = 0; seq < 300; ++seq) {
    std::vector<int32_t> ids(1 + rng() % 48);
    for (int32_t& id : ids) {
      id = (!interesting.empty() && rng() % 3 == 0) ? interesting[rng() % interesting.size()] : any_id(rng);
    }
    check_stream({}, ids, seq % 2 == 0);
    if (HasFatalFailure()) return;
  }
}

TEST_P(Detokenizer, CorpusLinesStreamExactly) {
  const auto lines = test::corpus_lines();
  for (size_t i = 0; i < lines.size(); i += 7) {
    const auto ids = tok_->encode(lines[i], true, true);
    check_stream({}, ids, false);
    check_stream({}, ids, true);
    if (HasFatalFailure()) return;
  }
}

TEST_P(Detokenizer, ContinuesAfterAPrompt) {
  const auto lines = test::corpus_lines();
  for (size_t i = 0; i + 1 < lines.size(); i += 11) {
    const auto prompt = tok_->encode(lines[i], true, true);
    const auto ids = tok_->encode(" " + lines[i + 1], false, true);
    check_stream(prompt, ids, true);
    if (HasFatalFailure()) return;
  }
}

TEST_P(Detokenizer, MultiByteCharacterIsHeldUntilComplete) {
  // "你好" fed one byte per token: byte-level tokens (GPT-2 alphabet) or byte-fallback pieces.
  const std::string text = "\xE4\xBD\xA0\xE5\xA5\xBD";
  std::vector<int32_t> level, fallback;
  for (unsigned char c : text) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", c);
    if (auto id = tok_->token_to_id(byte_level::encode(std::string(1, static_cast<char>(c))))) level.push_back(*id);
    if (auto id = tok_->token_to_id(name)) fallback.push_back(*id);
  }
  if (level.size() != text.size() && fallback.size() != text.size()) {
    GTEST_SKIP() << "vocabulary without byte-level or byte-fallback tokens (WordPiece)";
  }
  if (level.size() == text.size() && !tok_->token_to_id("<0xE4>")) {
    IncrementalDetokenizer detok(*tok_, true);
    EXPECT_EQ(detok.push(level[0]), "");
    EXPECT_EQ(detok.push(level[1]), "");
    EXPECT_EQ(detok.push(level[2]), "\xE4\xBD\xA0");
    EXPECT_EQ(detok.push(level[3]), "");
    EXPECT_EQ(detok.push(level[4]), "");
    EXPECT_EQ(detok.push(level[5]), "\xE5\xA5\xBD");
    EXPECT_EQ(detok.finish(), "");
  } else {
    // A byte-fallback run is held until a non-byte token closes it (or finish()).
    const auto word = tok_->encode("x", false, true);
    std::vector<int32_t> ids = fallback;
    ids.insert(ids.end(), word.begin(), word.end());
    IncrementalDetokenizer detok(*tok_, true);
    for (int32_t id : fallback) EXPECT_EQ(detok.push(id), "");
    std::string streamed;
    for (int32_t id : word) streamed += detok.push(id);
    streamed += detok.finish();
    EXPECT_EQ(streamed, tok_->decode(ids, true));
    EXPECT_EQ(streamed.compare(0, text.size(), text), 0) << streamed;
  }
}

TEST_P(Detokenizer, PromptEndingInsideACharacter) {
  // The prompt ends with the first byte of "你" (as a byte-level or byte-fallback token); the
  // generated ids complete it: the completed character is streamed as generated text.
  const std::string text = "\xE4\xBD\xA0";
  std::vector<int32_t> bytes;
  for (unsigned char c : text) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", c);
    auto id = tok_->token_to_id(name);
    if (!id) id = tok_->token_to_id(byte_level::encode(std::string(1, static_cast<char>(c))));
    if (!id) GTEST_SKIP() << "vocabulary without byte-level or byte-fallback tokens (WordPiece)";
    bytes.push_back(*id);
  }
  std::vector<int32_t> prompt = tok_->encode("Hi", false);
  prompt.push_back(bytes[0]);
  const auto word = tok_->encode(" ok", false);
  IncrementalDetokenizer detok(*tok_, true, prompt);
  std::string streamed = detok.push(bytes[1]);
  streamed += detok.push(bytes[2]);
  for (int32_t id : word) streamed += detok.push(id);
  streamed += detok.finish();
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), bytes.begin() + 1, bytes.end());
  all.insert(all.end(), word.begin(), word.end());
  const std::string full = tok_->decode(all, true);
  EXPECT_EQ(streamed.compare(0, text.size(), text), 0) << streamed;
  EXPECT_EQ(full.substr(full.size() - streamed.size()), streamed);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Detokenizer, ::testing::ValuesIn(test::fixtures()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rlm
