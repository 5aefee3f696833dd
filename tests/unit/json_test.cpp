// parse_json: the depth and size limits hold before any recursive work (a text nested 10^6 deep
// is rejected without touching the stack), strings and escapes do not confuse the nesting
// count, and 10,000 seeded mutations of real JSON files each give an error Status or a value
// that nests within the limit and round-trips through dump().
#include "core/json.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "unit/fuzz_util.h"

namespace rlm {
namespace {

using nlohmann::json;

// Depth of a parsed value, without recursion.
int value_depth(const json& root) {
  int deepest = 0;
  std::vector<std::pair<const json*, int>> stack = {{&root, 0}};
  while (!stack.empty()) {
    auto [v, d] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    deepest = std::max(deepest, d + 1);
    for (const auto& child : *v) stack.emplace_back(&child, d + 1);
  }
  return deepest;
}

std::string read_text(const std::string& rel) {
  std::ifstream in(std::string(RADIXLM_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Json, DepthIsCountedOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("1", 10), 0);
  EXPECT_EQ(json_nesting_depth("[]", 10), 1);
  EXPECT_EQ(json_nesting_depth("{\"a\": [[1], {\"b\": []}]}", 10), 4);
  EXPECT_EQ(json_nesting_depth("[\"[[[[{{{{\"]", 10), 1);
  EXPECT_EQ(json_nesting_depth("[\"\\\"[[[[\"]", 10), 1);     // escaped quote stays inside the string
  EXPECT_EQ(json_nesting_depth("[\"\\\\\", [[]]]", 10), 3);   // escaped backslash ends the escape
  EXPECT_EQ(json_nesting_depth("]]]][", 10), 1);               // stray closers never go negative
  EXPECT_EQ(json_nesting_depth(std::string(1000, '['), 5), 6);  // stops once past the limit
}

TEST(Json, LimitsNamedInErrors) {
  const JsonLimits limits{4, 64};
  EXPECT_TRUE(parse_json("[[[[1]]]]", limits).is_ok());
  auto deep = parse_json("[[[[[1]]]]]", limits);
  ASSERT_FALSE(deep.is_ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("nests deeper than 4 levels"), std::string::npos) << deep.status().message();
  auto big = parse_json("\"" + std::string(70, 'x') + "\"", limits);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("exceeds the limit of 64 bytes"), std::string::npos) << big.status().message();
  auto bad = parse_ordered_json("{\"a\": }", limits);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos) << bad.status().message();
}

TEST(Json, HostileNestingIsRejectedWithoutRecursion) {
  for (const std::string& open : {std::string("["), std::string("{\"a\":")}) {
    const std::string text = "{\"a\":" + [&] {
      std::string s;
      for (int i = 0; i < 1'000'000; ++i) s += open;
      return s;
    }() + "1";
    auto r = parse_ordered_json(text, kRequestJsonLimits);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("nests deeper than 128 levels"), std::string::npos);
  }
  // Exactly at the limit parses, one more does not.
  const auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  auto at = parse_json(nested(kRequestJsonLimits.max_depth), kRequestJsonLimits);
  ASSERT_TRUE(at.is_ok()) << at.status().to_string();
  EXPECT_EQ(value_depth(*at), kRequestJsonLimits.max_depth);
  EXPECT_FALSE(parse_json(nested(kRequestJsonLimits.max_depth + 1), kRequestJsonLimits).is_ok());
}

TEST(Json, ReadJsonFileNamesThePath) {
  auto missing = read_json_file("/nonexistent/config.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const std::string path = ::testing::TempDir() + "/json_test_deep.json";
  std::ofstream(path) << std::string(100'000, '[') << std::string(100'000, ']');
  auto deep = read_json_file(path);
  ASSERT_FALSE(deep.is_ok());
  EXPECT_NE(deep.status().message().find(path), std::string::npos);
  EXPECT_NE(deep.status().message().find("nests deeper than 512 levels"), std::string::npos);
  auto small = read_json_file(path, {600'000, 1000});
  ASSERT_FALSE(small.is_ok());
  EXPECT_NE(small.status().message().find("exceeds the limit of 1000 bytes"), std::string::npos);
}

TEST(JsonFuzz, MutatedFilesGiveAStatusOrAValueWithinTheLimits) {
  const std::vector<std::string> seeds = {
      read_text("tests/data/configs/qwen3_v5/config.json"), read_text("tests/data/configs/llama31_v4/config.json"),
      read_text("tests/data/safetensors/fixture.json"), read_text("tests/data/chat_templates/feature_cases.json"),
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi \u00e9 \ud83c\udf89"}]}],)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"n":1e2})"};
  for (const auto& s : seeds) ASSERT_FALSE(s.empty());
  fuzz::Mutator m(fuzz::seed(20240612), fuzz::json_dictionary());
  const JsonLimits limits{16, 1 << 20};
  const int iters = fuzz::iterations(10000);
  int ok = 0, rejected = 0;
  fuzz::SlowestInput slowest;
  for (int i = 0; i < iters; ++i) {
    std::string text = m.mutate(seeds[i % seeds.size()]);
    if (m.below(8) == 0) text = std::string(m.below(64), '[') + text;  // deep prefixes
    slowest.run([&] {
      auto r = parse_ordered_json(text, limits);
      if (!r.is_ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "input " << i;
        ++rejected;
        return;
      }
      ++ok;
      const std::string dumped = r->dump(-1, ' ', false, json::error_handler_t::replace);
      auto again = parse_ordered_json(dumped, limits);
      ASSERT_TRUE(again.is_ok()) << "input " << i << ": " << again.status().to_string();
      EXPECT_LE(value_depth(json::parse(dumped)), limits.max_depth) << "input " << i;
    });
  }
  std::printf("%d parsed, %d rejected; slowest input %.3f s\n", ok, rejected, slowest.seconds());
  EXPECT_GT(ok, iters / 50);        // the mutations keep some inputs valid...
  EXPECT_GT(rejected, iters / 2);   // ...and break most
  EXPECT_LT(slowest.seconds(), 5.0);
}

}  // namespace
}  // namespace rlm
