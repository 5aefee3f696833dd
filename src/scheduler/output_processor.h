// Turns a request's sampled tokens into client-visible text: incremental detokenization (never
// splitting a UTF-8 character) and stop strings matched across token boundaries. Text that could
// still become the start of a stop string is held back until it cannot; a matched stop string
// and everything after it are dropped.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rlm {

// Streaming token -> text decoder for one request (implemented over the tokenizer's incremental
// detokenizer; tests use a fake).
class TokenTextDecoder {
 public:
  virtual ~TokenTextDecoder() = default;
  // Appends a token; returns newly complete text (may be empty).
  virtual std::string push(int32_t token) = 0;
  // Text still held (e.g. an incomplete UTF-8 tail) at the end of the request.
  virtual std::string flush() = 0;
};

using TokenTextDecoderFactory = std::function<std::unique_ptr<TokenTextDecoder>(bool skip_special_tokens)>;

class OutputProcessor {
 public:
  OutputProcessor(std::unique_ptr<TokenTextDecoder> decoder, std::vector<std::string> stop);

  struct Result {
    std::string text;                       // text safe to emit now
    std::optional<std::string> matched_stop;  // set when a stop string ended the output
  };
  // Feeds one token. After a stop match, further calls are not allowed.
  Result push(int32_t token);
  // At the end (length/EOS/abort): releases held-back text.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::unique_ptr<TokenTextDecoder> decoder_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded but not yet emitted (possible stop-string prefix)
  bool stopped_ = false;
};

}  // namespace rlm
