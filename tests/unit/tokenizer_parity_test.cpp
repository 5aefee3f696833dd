// Token-id parity with Hugging Face `tokenizers` (and `sentencepiece` for tokenizer.model) on the
// committed corpus: every line must give identical ids with and without special tokens, with
// special-token strings treated as text, and identical decodes.
#include <gtest/gtest.h>

#include <filesystem>

#include "unit/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace rlm {
namespace {

using nlohmann::json;

class TokenizerParity : public ::testing::TestWithParam<test::Fixture> {};

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

TEST_P(TokenizerParity, MatchesReferenceOnEveryCorpusLine) {
  const test::Fixture& f = GetParam();
  if (!test::fixture_available(f)) {
    GTEST_SKIP() << test::fixture_path(f) << " is missing: run scripts/setup.sh (default model) and "
                 << ".venv/bin/python tools/make_tokenizer_fixtures.py --only llama3,qwen3 and "
                 << "tools/make_gguf_vocab_fixtures.py";
  }
  auto tok = test::load_fixture(f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto lines = test::corpus_lines();
  const auto refs = test::read_jsonl(test::tokenizer_data(f.ref_name() + ".ref.jsonl"));
  ASSERT_GE(lines.size(), 2000u);
  ASSERT_EQ(lines.size(), refs.size()) << "reference out of date: rerun tools/make_tokenizer_golden.py";
  int failures = 0;
  auto check = [&](size_t i, const char* what, const auto& got, const auto& want) {
    if (got == want) return;
    if (++failures <= 12) {
      ADD_FAILURE() << f.name << " line " << i + 1 << " " << what << "\n  text: " << json(lines[i]).dump(-1, ' ', true, json::error_handler_t::replace);
    }
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const json& r = refs[i];
    const auto ids = r["ids"].get<std::vector<int32_t>>();
    const auto ids_special = r.contains("ids_special") ? r["ids_special"].get<std::vector<int32_t>>() : ids;
    const auto ids_nospecial = r.contains("ids_nospecial") ? r["ids_nospecial"].get<std::vector<int32_t>>() : ids;
    const std::string decoded = r.contains("decode") ? r["decode"].get<std::string>() : lines[i];
    const std::string decoded_skip = r.contains("decode_skip") ? r["decode_skip"].get<std::string>() : decoded;

    const auto got = (*tok)->encode(lines[i], false, true);
    if (got != ids) {
      check(i, ("ids " + show(got) + " != " + show(ids)).c_str(), got, ids);
    }
    const auto got_special = (*tok)->encode(lines[i], true, true);
    if (got_special != ids_special) check(i, ("ids_special " + show(got_special) + " != " + show(ids_special)).c_str(), got_special, ids_special);
    const auto got_nospecial = (*tok)->encode(lines[i], false, false);
    if (got_nospecial != ids_nospecial) check(i, ("ids_nospecial " + show(got_nospecial) + " != " + show(ids_nospecial)).c_str(), got_nospecial, ids_nospecial);
    const std::string d = (*tok)->decode(ids, false);
    if (d != decoded) check(i, ("decode " + json(d).dump(-1, ' ', true, json::error_handler_t::replace) + " != " + json(decoded).dump(-1, ' ', true)).c_str(), d, decoded);
    const std::string ds = (*tok)->decode(ids_special, true);
    if (ds != decoded_skip) check(i, ("decode_skip " + json(ds).dump(-1, ' ', true, json::error_handler_t::replace) + " != " + json(decoded_skip).dump(-1, ' ', true)).c_str(), ds, decoded_skip);
  }
  EXPECT_EQ(failures, 0) << f.name << ": " << failures << " mismatches over " << lines.size() << " lines";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerParity, ::testing::ValuesIn(test::fixtures()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rlm
