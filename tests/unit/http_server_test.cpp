// The HTTP server's pure pieces: API key checks, request ids and client aliases, content
// decoding with its cap, and the router's 404/405 decision. References: zlib's own deflate for
// the compressed inputs, the definitions in the headers for the rest.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "server/api_key.h"
#include "server/content_coding.h"
#include "server/http_router.h"
#include "server/request_ids.h"
#include "unit/zlib_test_util.h"

namespace rlm {
namespace {

TEST(ApiKey, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(constant_time_equals("sekret", "sekret"));
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_FALSE(constant_time_equals("sekreT", "sekret"));
  EXPECT_FALSE(constant_time_equals("sekret", "sekret2"));
  EXPECT_FALSE(constant_time_equals("sekret2", "sekret"));
  EXPECT_FALSE(constant_time_equals("", "sekret"));
  EXPECT_FALSE(constant_time_equals("x", ""));
  EXPECT_FALSE(constant_time_equals(std::string("a\0b", 3), "a"));
}

TEST(ApiKey, BearerSchemeIsCaseInsensitive) {
  EXPECT_TRUE(bearer_matches("Bearer sekret", "sekret"));
  EXPECT_TRUE(bearer_matches("bearer sekret", "sekret"));
  EXPECT_TRUE(bearer_matches("BEARER   sekret  ", "sekret"));
  EXPECT_TRUE(bearer_matches("\tBearer\tsekret", "sekret"));
  EXPECT_FALSE(bearer_matches(std::nullopt, "sekret"));
  EXPECT_FALSE(bearer_matches("", "sekret"));
  EXPECT_FALSE(bearer_matches("sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Basic sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearersekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearer Sekret", "sekret"));  // the key itself is case-sensitive
  EXPECT_FALSE(bearer_matches("Bearer sekret x", "sekret"));
}

TEST(RequestIds, AreFreshHexOf128Bits) {
  const std::regex shape("chatcmpl-[0-9a-f]{32}");
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = new_request_id("chatcmpl-");
    EXPECT_TRUE(std::regex_match(id, shape)) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(RequestIds, ClientAliasesAreNamespacedAndResolveChoices) {
  RidAliases aliases;
  HttpRequest alice, bob, alice_other_host;
  alice.peer = bob.peer = "10.0.0.1";
  alice.headers.add("Authorization", "Bearer alice");
  bob.headers.add("authorization", "Bearer bob");
  alice_other_host.peer = "10.0.0.2";
  alice_other_host.headers.add("Authorization", "Bearer alice");
  const std::string a = RidAliases::namespace_of(alice), b = RidAliases::namespace_of(bob),
                    c = RidAliases::namespace_of(alice_other_host);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_TRUE(aliases.add(a, "job", "0123"));
  EXPECT_FALSE(aliases.add(a, "job", "4567"));  // live in alice's namespace
  EXPECT_TRUE(aliases.add(b, "job", "89ab"));   // bob's own "job"
  EXPECT_EQ(aliases.resolve(a, "job").value_or(""), "0123");
  EXPECT_EQ(aliases.resolve(b, "job").value_or(""), "89ab");
  EXPECT_FALSE(aliases.resolve(c, "job").has_value());
  EXPECT_EQ(aliases.resolve(a, "job-3").value_or(""), "0123-3");  // one choice
  EXPECT_FALSE(aliases.resolve(a, "jo").has_value());             // never a prefix
  EXPECT_FALSE(aliases.resolve(a, "job-").has_value());
  EXPECT_FALSE(aliases.resolve(a, "job-x").has_value());
  aliases.remove(a, "job");
  EXPECT_FALSE(aliases.resolve(a, "job").has_value());
  EXPECT_EQ(aliases.size(), 1u);
}

std::string compress(const std::string& data, int window_bits) { return testing::zlib_compress(data, window_bits); }

TEST(ContentCoding, NamesAndUnsupportedCodings) {
  EXPECT_EQ(parse_content_coding(""), ContentCoding::kIdentity);
  EXPECT_EQ(parse_content_coding(" Identity "), ContentCoding::kIdentity);
  EXPECT_EQ(parse_content_coding("GZIP"), ContentCoding::kGzip);
  EXPECT_EQ(parse_content_coding("x-gzip"), ContentCoding::kGzip);
  EXPECT_EQ(parse_content_coding("deflate"), ContentCoding::kDeflate);
  EXPECT_FALSE(parse_content_coding("br").has_value());
  EXPECT_FALSE(parse_content_coding("gzip, gzip").has_value());
}

TEST(ContentCoding, DecodesGzipZlibAndRawDeflateWithinTheCap) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "token " + std::to_string(i) + " ";
  const int64_t cap = static_cast<int64_t>(text.size());
  auto gz = decode_content(ContentCoding::kGzip, compress(text, 31), cap);
  ASSERT_TRUE(gz.is_ok()) << gz.status().to_string();
  EXPECT_EQ(*gz, text);
  auto two = decode_content(ContentCoding::kGzip, compress("ab", 31) + compress("cd", 31), 10);
  ASSERT_TRUE(two.is_ok());  // several gzip members
  EXPECT_EQ(*two, "abcd");
  for (int bits : {15, -15}) {
    auto d = decode_content(ContentCoding::kDeflate, compress(text, bits), cap);
    ASSERT_TRUE(d.is_ok()) << bits << ": " << d.status().to_string();
    EXPECT_EQ(*d, text);
  }
  // One byte over the cap, and a bomb: stops at the cap instead of inflating everything.
  auto over = decode_content(ContentCoding::kGzip, compress(text, 31), cap - 1);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  auto bomb = decode_content(ContentCoding::kGzip, compress(std::string(50'000'000, '0'), 31), 1'000'000);
  EXPECT_EQ(bomb.status().code(), StatusCode::kResourceExhausted);
  auto identity = decode_content(ContentCoding::kIdentity, "abc", 2);
  EXPECT_EQ(identity.status().code(), StatusCode::kResourceExhausted);
}

TEST(ContentCoding, CorruptOrTruncatedInputIsABadRequest) {
  const std::string gz = compress("hello world, hello world", 31);
  EXPECT_EQ(decode_content(ContentCoding::kGzip, gz.substr(0, gz.size() - 6), 100).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_content(ContentCoding::kGzip, "plain text", 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_content(ContentCoding::kGzip, gz + "junk", 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_content(ContentCoding::kDeflate, "plain text", 100).status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpRouter, MatchesExactPathsAndListsAllowedMethods) {
  HttpRouter router;
  int called = 0;
  auto h = [&](const std::shared_ptr<HttpExchange>&) { ++called; };
  router.add("GET", "/v1/models", h);
  router.add("POST", "/v1/completions", h);
  router.add("GET", "/health", h, /*open=*/true);
  router.add("POST", "/health", h);
  std::string allow;
  const HttpRoute* r = router.match("POST", "/v1/completions", &allow);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->open);
  EXPECT_EQ(router.match("GET", "/v1/completions", &allow), nullptr);
  EXPECT_EQ(allow, "POST");
  EXPECT_EQ(router.match("DELETE", "/health", &allow), nullptr);
  EXPECT_EQ(allow, "GET, POST");
  EXPECT_EQ(router.match("GET", "/v1/completions/", &allow), nullptr);
  EXPECT_EQ(allow, "");  // 404: no such path
  EXPECT_EQ(router.match("GET", "/v1", &allow), nullptr);
  EXPECT_EQ(allow, "");
  // The guard sees the head and the route, and may answer instead.
  router.set_guard([](const HttpRequest& head, const HttpRoute& route) -> std::optional<HttpResponse> {
    if (route.open || head.headers.find("X-Ok")) return std::nullopt;
    return error_response({401, "no", "authentication_error", ""});
  });
  HttpRequest head;
  EXPECT_EQ(router.check_access(head, *router.match("GET", "/v1/models", &allow))->status, 401);
  EXPECT_FALSE(router.check_access(head, *router.match("GET", "/health", &allow)).has_value());
  head.headers.add("x-ok", "1");
  EXPECT_FALSE(router.check_access(head, *router.match("GET", "/v1/models", &allow)).has_value());
}

}  // namespace
}  // namespace rlm
