// grammar/ on xgrammar's C++ core with real vocabularies (SmolLM2's byte-level BPE, Mistral's
// SentencePiece): the vocabulary encoding is detected; random walks through JSON-schema, regex and
// EBNF grammars (each step a random token among those the mask allows) always end in a stop token
// with text that the grammar describes (parsed with nlohmann::json, which rejects raw control
// characters in strings as JSON does, / matched with std::regex here);
// a stop token is allowed only once the grammar is complete; batched mask fills equal one-by-one
// fills; bad schemas, regexes and grammars are kInvalidArgument.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace rlm::grammar {
namespace {

std::string data(const std::string& rel) { return std::string(RADIXLM_SOURCE_DIR) + "/tests/data/tokenizer/" + rel; }

std::unique_ptr<Tokenizer> smollm2() {
  auto t = load_tokenizer(data("smollm2/tokenizer.json"));
  RLM_CHECK(t.is_ok()) << t.status().to_string();
  return std::move(*t);
}

bool bit(const std::vector<int32_t>& words, int64_t t) { return (static_cast<uint32_t>(words[t / 32]) >> (t % 32)) & 1u; }

struct Walk {
  std::string text;
  bool terminated = false;
};

// Random allowed tokens until the matcher terminates (or max_steps).
Walk random_walk(const Tokenizer& tok, std::shared_ptr<const CompiledGrammar> g, int64_t vocab, uint64_t seed,
                 int max_steps = 400) {
  GrammarMatcher m(std::move(g));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> words(static_cast<size_t>(bitmask_words(vocab)));
  std::vector<int32_t> out;
  Walk w;
  for (int step = 0; step < max_steps && !m.terminated(); ++step) {
    m.fill_next_token_bitmask(words.data());
    std::vector<int32_t> ok;
    for (int64_t t = 0; t < vocab; ++t) {
      if (bit(words, t)) ok.push_back(static_cast<int32_t>(t));
    }
    EXPECT_FALSE(ok.empty()) << "no token allowed after " << tok.decode(out);
    if (ok.empty()) break;
    const int32_t t = ok[rng() % ok.size()];
    EXPECT_TRUE(m.accept(t)) << "allowed token " << t << " refused";
    if (!m.terminated()) out.push_back(t);
  }
  w.terminated = m.terminated();
  w.text = tok.decode(out);
  return w;
}

TEST(Grammar, VocabularyEncodingDetected) {
  auto smol = smollm2();
  const EncodedVocab v = encoded_vocab(*smol);
  EXPECT_EQ(v.vocab_type, 2);  // byte level
  EXPECT_EQ(static_cast<int32_t>(v.tokens.size()), smol->vocab_size());
  const int32_t im_end = *smol->token_to_id("<|im_end|>");
  EXPECT_EQ(v.tokens[im_end], "");  // special: never allowed as text
  auto spm = load_tokenizer(data("mistral_v1/tokenizer.model"));
  ASSERT_TRUE(spm.is_ok()) << spm.status().to_string();
  EXPECT_EQ(encoded_vocab(**spm).vocab_type, 1);  // SentencePiece byte fallback
}

TEST(Grammar, RandomWalksMatchTheirGrammars) {
  auto tok = smollm2();
  const int64_t vocab = 49152 + 64;  // padded past the tokenizer: those ids are never allowed
  const int32_t eos = *tok->token_to_id("<|im_end|>");
  GrammarCompiler c(*tok, vocab, {eos});
  const std::string schema = R"({"type": "object", "properties": {
      "n": {"type": "integer", "minimum": -5, "maximum": 40},
      "color": {"enum": ["red", "green", "blue"]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
      "ok": {"type": "boolean"}},
    "required": ["n", "color", "tags", "ok"], "additionalProperties": false})";
  auto json = c.compile({GrammarKind::kJsonSchema, schema, true});
  ASSERT_TRUE(json.is_ok()) << json.status().to_string();
  auto object = c.compile({GrammarKind::kJsonObject, "", false});
  ASSERT_TRUE(object.is_ok()) << object.status().to_string();
  auto regex = c.compile({GrammarKind::kRegex, "[a-c]{2}-[0-9]{1,3}", false});
  ASSERT_TRUE(regex.is_ok()) << regex.status().to_string();
  auto ebnf = c.compile({GrammarKind::kEbnf, R"(root ::= "yes" | "no" | ("maybe " [0-9]))", false});
  ASSERT_TRUE(ebnf.is_ok()) << ebnf.status().to_string();
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Walk w = random_walk(*tok, *json, vocab, seed);
    ASSERT_TRUE(w.terminated) << w.text;
    const nlohmann::json j = nlohmann::json::parse(w.text);
    EXPECT_EQ(j.size(), 4u) << w.text;
    EXPECT_TRUE(j["n"].is_number_integer() && j["n"] >= -5 && j["n"] <= 40) << w.text;
    EXPECT_TRUE(j["color"] == "red" || j["color"] == "green" || j["color"] == "blue") << w.text;
    EXPECT_TRUE(j["tags"].is_array() && j["tags"].size() <= 3) << w.text;
    for (const auto& t : j["tags"]) EXPECT_TRUE(t.is_string() && utf8::length(t.get<std::string>()) <= 6) << w.text;
    EXPECT_TRUE(j["ok"].is_boolean()) << w.text;

    w = random_walk(*tok, *regex, vocab, seed);
    ASSERT_TRUE(w.terminated) << w.text;
    EXPECT_TRUE(std::regex_match(w.text, std::regex("[a-c]{2}-[0-9]{1,3}"))) << w.text;
    w = random_walk(*tok, *ebnf, vocab, seed);
    ASSERT_TRUE(w.terminated) << w.text;
    EXPECT_TRUE(std::regex_match(w.text, std::regex("yes|no|maybe [0-9]"))) << w.text;
  }
  // Any object: the walk may nest deeply, so only finished walks are checked.
  int finished = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    Walk w = random_walk(*tok, *object, vocab, seed, 200);
    if (!w.terminated) continue;
    ++finished;
    EXPECT_TRUE(nlohmann::json::parse(w.text).is_object()) << w.text;
  }
  EXPECT_GT(finished, 0);
}

TEST(Grammar, StopTokenOnlyWhenComplete) {
  auto tok = smollm2();
  const int64_t vocab = 49152;
  const int32_t eos = *tok->token_to_id("<|im_end|>");
  GrammarCompiler c(*tok, vocab, {eos});
  auto g = c.compile({GrammarKind::kRegex, "ab+", false});
  ASSERT_TRUE(g.is_ok());
  GrammarMatcher m(*g);
  std::vector<int32_t> words(static_cast<size_t>(bitmask_words(vocab)));
  m.fill_next_token_bitmask(words.data());
  EXPECT_FALSE(bit(words, eos));
  const int32_t a = *tok->token_to_id("a"), b = *tok->token_to_id("b");
  EXPECT_TRUE(bit(words, a));
  EXPECT_FALSE(bit(words, b));
  EXPECT_FALSE(m.accept(b));  // refused, state unchanged
  EXPECT_TRUE(m.accept(a));
  m.fill_next_token_bitmask(words.data());
  EXPECT_FALSE(bit(words, eos));
  EXPECT_TRUE(m.accept(b));
  m.fill_next_token_bitmask(words.data());
  EXPECT_TRUE(bit(words, eos));
  EXPECT_TRUE(bit(words, b));
  EXPECT_FALSE(bit(words, a));
  EXPECT_TRUE(m.accept(eos));
  EXPECT_TRUE(m.terminated());
  EXPECT_FALSE(m.accept(b));
}

TEST(Grammar, BatchFillEqualsSingleFills) {
  auto tok = smollm2();
  const int64_t vocab = 49152;
  GrammarCompiler c(*tok, vocab, {*tok->token_to_id("<|im_end|>")});
  auto g = c.compile({GrammarKind::kJsonObject, "", false});
  ASSERT_TRUE(g.is_ok());
  std::vector<std::unique_ptr<GrammarMatcher>> ms;
  std::mt19937 rng(1);
  const int64_t w = bitmask_words(vocab);
  std::vector<int32_t> one(static_cast<size_t>(w));
  for (int i = 0; i < 7; ++i) {
    ms.push_back(std::make_unique<GrammarMatcher>(*g));
    for (int s = 0; s < i * 3; ++s) {  // different states: i * 3 random allowed tokens
      ms.back()->fill_next_token_bitmask(one.data());
      std::vector<int32_t> ok;
      for (int64_t t = 0; t < vocab; ++t) {
        if (bit(one, t)) ok.push_back(static_cast<int32_t>(t));
      }
      ASSERT_TRUE(ms.back()->accept(ok[rng() % ok.size()]));
      if (ms.back()->terminated()) break;
    }
  }
  std::vector<GrammarMatcher*> ptrs;
  for (auto& m : ms) ptrs.push_back(m.get());
  std::vector<int32_t> batch(static_cast<size_t>(w * ms.size()), 0x5a5a5a5a);
  GrammarMatcher::fill_batch(ptrs, batch.data());
  for (size_t i = 0; i < ms.size(); ++i) {
    ms[i]->fill_next_token_bitmask(one.data());
    EXPECT_TRUE(std::equal(one.begin(), one.end(), batch.begin() + static_cast<int64_t>(i) * w)) << "matcher " << i;
  }
}

TEST(Grammar, BadInputIsInvalidArgument) {
  auto tok = smollm2();
  GrammarCompiler c(*tok, 49152, {*tok->token_to_id("<|im_end|>")});
  for (const GrammarSpec& spec : {GrammarSpec{GrammarKind::kRegex, "(ab", false},
                                  GrammarSpec{GrammarKind::kEbnf, "root ::= missing_rule", false},
                                  GrammarSpec{GrammarKind::kEbnf, "not a grammar", false},
                                  GrammarSpec{GrammarKind::kJsonSchema, "{\"type\": 5}", true},
                                  GrammarSpec{GrammarKind::kJsonSchema, "not json", true},
                                  GrammarSpec{GrammarKind::kStructuralTag, "{\"format\": 3}", false}}) {
    auto g = c.compile(spec);
    ASSERT_FALSE(g.is_ok()) << spec.source;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << spec.source;
    EXPECT_NE(g.status().message().find(grammar_kind_name(spec.kind)), std::string::npos) << g.status().message();
  }
}

}  // namespace
}  // namespace rlm::grammar
