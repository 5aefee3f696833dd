// SSE parsing (chunk boundaries anywhere), stream accumulation per backend, request bodies and
// base-URL parsing of the `bench serve` client.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "bench/request_client.h"
#include "bench/sse_parser.h"

namespace rlm::bench {
namespace {

std::vector<std::string> parse_in_pieces(const std::string& stream, const std::vector<size_t>& cuts) {
  std::vector<std::string> events;
  SseParser p([&](std::string_view d) { events.emplace_back(d); });
  size_t prev = 0;
  for (size_t c : cuts) {
    p.feed(std::string_view(stream).substr(prev, c - prev));
    prev = c;
  }
  p.feed(std::string_view(stream).substr(prev));
  p.finish();
  return events;
}

const std::string kStream =
    ": keep-alive comment\r\n\r\n"
    "data: {\"a\":1}\n\n"
    "event: message\r\ndata: {\"b\":\"x y\"}\r\n\r\n"
    "data:nospace\n\n"
    "data: line1\ndata: line2\n\n"
    "id: 7\nretry: 10\n\n"
    "data: [DONE]\n\n";
const std::vector<std::string> kExpected = {"{\"a\":1}", "{\"b\":\"x y\"}", "nospace", "line1\nline2",
                                            "[DONE]"};

TEST(BenchSseParser, WholeStream) { EXPECT_EQ(parse_in_pieces(kStream, {}), kExpected); }

TEST(BenchSseParser, EverySingleSplitPoint) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    EXPECT_EQ(parse_in_pieces(kStream, {cut}), kExpected) << "split at " << cut;
  }
}

TEST(BenchSseParser, ByteByByteAndRandomPieces) {
  std::vector<size_t> all;
  for (size_t i = 1; i < kStream.size(); ++i) all.push_back(i);
  EXPECT_EQ(parse_in_pieces(kStream, all), kExpected);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<size_t> cuts;
    for (size_t i = 1; i < kStream.size(); ++i) {
      if (rng() % 5 == 0) cuts.push_back(i);
    }
    EXPECT_EQ(parse_in_pieces(kStream, cuts), kExpected) << "trial " << trial;
  }
}

TEST(BenchSseParser, UnterminatedLastEventIsFlushedAtFinish) {
  EXPECT_EQ(parse_in_pieces("data: {\"a\":1}\n\ndata: tail", {}),
            (std::vector<std::string>{"{\"a\":1}", "tail"}));
}

TEST(BenchStreamAccumulator, CompletionsTimingAndUsage) {
  StreamAccumulator acc(Backend::kOpenAiCompletions);
  // A role-less first chunk with empty text does not count as the first token.
  acc.on_event(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})", 0.05);
  acc.on_event(R"({"choices":[{"index":0,"text":"Hello","finish_reason":null}]})", 0.10);
  acc.on_event(R"({"choices":[{"index":0,"text":" wor","finish_reason":null}]})", 0.13);
  acc.on_event(R"({"choices":[{"index":0,"text":"ld","finish_reason":"length"}]})", 0.18);
  acc.on_event(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4}})", 0.19);
  acc.on_event("[DONE]", 0.19);
  RequestOutcome out;
  out.planned_input_len = 10;
  acc.finish(0.2, out);
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.10);
  ASSERT_EQ(out.itl_s.size(), 2u);
  EXPECT_NEAR(out.itl_s[0], 0.03, 1e-12);
  EXPECT_NEAR(out.itl_s[1], 0.05, 1e-12);
  EXPECT_EQ(out.output_len, 4);  // usage wins over the 3 counted chunks
  EXPECT_EQ(out.input_len, 12);
  EXPECT_EQ(out.num_chunks, 3);
  EXPECT_TRUE(out.usage_reported);
  EXPECT_EQ(out.generated_text, "Hello world");
  EXPECT_DOUBLE_EQ(out.latency_s, 0.2);
}

TEST(BenchStreamAccumulator, ChatWithoutUsageCountsChunks) {
  StreamAccumulator acc(Backend::kOpenAiChat);
  acc.on_event(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.01);
  acc.on_event(R"({"choices":[{"delta":{"content":"A"}}]})", 0.02);
  acc.on_event(R"({"choices":[{"delta":{"reasoning_content":"hmm"}}]})", 0.04);
  acc.on_event(R"({"choices":[{"delta":{},"finish_reason":"stop"}]})", 0.05);
  acc.on_event("[DONE]", 0.05);
  RequestOutcome out;
  out.planned_input_len = 7;
  acc.finish(0.06, out);
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.02);
  EXPECT_EQ(out.output_len, 2);
  EXPECT_EQ(out.input_len, 7);
  EXPECT_FALSE(out.usage_reported);
}

TEST(BenchStreamAccumulator, SglangCumulativeText) {
  StreamAccumulator acc(Backend::kSglang);
  acc.on_event(R"({"text":"a","meta_info":{"prompt_tokens":5,"completion_tokens":1,"finish_reason":null}})", 0.1);
  acc.on_event(R"({"text":"ab","meta_info":{"prompt_tokens":5,"completion_tokens":3,"finish_reason":null}})", 0.3);
  acc.on_event(R"({"text":"abc","meta_info":{"prompt_tokens":5,"completion_tokens":4,"finish_reason":{"type":"length"}}})", 0.4);
  acc.on_event("[DONE]", 0.4);
  RequestOutcome out;
  acc.finish(0.5, out);
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.1);
  ASSERT_EQ(out.itl_s.size(), 2u);  // one gap per chunk, even when it carries 2 tokens
  EXPECT_EQ(out.output_len, 4);
  EXPECT_EQ(out.input_len, 5);
  EXPECT_EQ(out.generated_text, "abc");
}

TEST(BenchStreamAccumulator, Failures) {
  {
    StreamAccumulator acc(Backend::kOpenAiCompletions);
    acc.on_event(R"({"error":{"message":"prompt too long","code":400}})", 0.1);
    RequestOutcome out;
    acc.finish(0.1, out);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("prompt too long"), std::string::npos) << out.error;
  }
  {
    StreamAccumulator acc(Backend::kOpenAiCompletions);
    acc.on_event("{not json", 0.1);
    RequestOutcome out;
    acc.finish(0.1, out);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("malformed"), std::string::npos) << out.error;
  }
  {
    StreamAccumulator acc(Backend::kOpenAiCompletions);
    acc.on_event(R"({"choices":[{"text":"x","finish_reason":null}]})", 0.1);
    RequestOutcome out;
    acc.finish(0.1, out);  // cut off: no [DONE], no finish_reason
    EXPECT_FALSE(out.success);
  }
  {
    StreamAccumulator acc(Backend::kOpenAiCompletions);
    acc.on_event("[DONE]", 0.1);
    RequestOutcome out;
    acc.finish(0.1, out);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("no generated text"), std::string::npos) << out.error;
  }
  {
    // Tokens whose text is empty (special tokens skipped by the detokenizer) are still tokens
    // when the usage counts them; the stream is timed from its first chunk.
    StreamAccumulator acc(Backend::kOpenAiCompletions);
    acc.on_event(R"({"choices":[{"text":"","finish_reason":null}]})", 0.1);
    acc.on_event(R"({"choices":[{"text":"","finish_reason":"length"}]})", 0.3);
    acc.on_event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}})", 0.3);
    acc.on_event("[DONE]", 0.3);
    RequestOutcome out;
    acc.finish(0.3, out);
    EXPECT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.num_chunks, 0);
    EXPECT_EQ(out.output_len, 2);
    EXPECT_DOUBLE_EQ(out.ttft_s, 0.1);
  }
}

TEST(BenchRequestBody, PerBackend) {
  RequestSpec spec;
  spec.prompt_ids = {5, 6, 7};
  spec.max_tokens = 9;
  RequestOptions o;
  o.model = "m";
  o.extra_body = {{"top_k", 3}};
  nlohmann::json b = build_request_body(spec, o);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(b["max_tokens"], 9);
  EXPECT_EQ(b["ignore_eos"], true);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["top_k"], 3);

  o.backend = Backend::kSglang;
  o.ignore_eos = false;
  b = build_request_body(spec, o);
  EXPECT_EQ(b["input_ids"], nlohmann::json({5, 6, 7}));
  EXPECT_EQ(b["sampling_params"]["max_new_tokens"], 9);
  EXPECT_EQ(b["sampling_params"]["ignore_eos"], false);

  o.backend = Backend::kOpenAiChat;
  spec.prompt_ids.clear();
  spec.messages = {{"user", "hi"}, {"assistant", "yo"}, {"user", "again"}};
  b = build_request_body(spec, o);
  ASSERT_EQ(b["messages"].size(), 3u);
  EXPECT_EQ(b["messages"][1]["role"], "assistant");
  EXPECT_EQ(b["messages"][2]["content"], "again");
  EXPECT_FALSE(b.contains("prompt"));
}

TEST(BenchBaseUrl, Parse) {
  auto e = parse_base_url("http://127.0.0.1:8000");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 8000);
  EXPECT_EQ(e->path_prefix, "");
  e = parse_base_url("http://localhost/api/");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "localhost");
  EXPECT_EQ(e->port, 80);
  EXPECT_EQ(e->path_prefix, "/api");
  e = parse_base_url("http://[::1]:30000/x");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 30000);
  EXPECT_FALSE(parse_base_url("127.0.0.1:8000").is_ok());
  EXPECT_FALSE(parse_base_url("http://host:99999").is_ok());
  EXPECT_FALSE(parse_base_url("http://host:12ab").is_ok());
  EXPECT_EQ(parse_base_url("https://host").status().code(), StatusCode::kUnimplemented);
}

TEST(BenchBackend, Names) {
  EXPECT_EQ(parse_backend("openai").value(), Backend::kOpenAiCompletions);
  EXPECT_EQ(parse_backend("vllm-chat").value(), Backend::kOpenAiChat);
  EXPECT_EQ(parse_backend("sglang").value(), Backend::kSglang);
  EXPECT_FALSE(parse_backend("trt").is_ok());
}

}  // namespace
}  // namespace rlm::bench
