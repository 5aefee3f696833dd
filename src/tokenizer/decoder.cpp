#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"

namespace rlm {
namespace {

using nlohmann::json;
using Tokens = std::vector<std::string>;

class ByteLevelDecoder : public Decoder {
 public:
  // All tokens' bytes concatenated, then decoded lossily; a token with a code point outside the
  // byte-level alphabet (e.g. an added token) contributes its own UTF-8 bytes.
  Tokens decode_chain(Tokens tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      if (!byte_level::decode(t, &bytes)) bytes += t;
    }
    return {utf8::sanitize(bytes)};
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::optional<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  Tokens decode_chain(Tokens tokens) const override {
    for (std::string& t : tokens) {
      if (!regex_) {
        t = replace_all(std::move(t), literal_, content_);
        continue;
      }
      std::string out;
      size_t last = 0;
      for (auto [b, e] : regex_->find_all(t)) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

// Parses "<0xAB>" into its byte.
bool parse_byte_token(const std::string& t, unsigned char* byte) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return false;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return false;
  *byte = static_cast<unsigned char>(hi * 16 + lo);
  return true;
}

class ByteFallbackDecoder : public Decoder {
 public:
  // Runs of <0xAB> tokens become their bytes when those form valid UTF-8, else one U+FFFD per
  // byte token (Hugging Face's rule).
  Tokens decode_chain(Tokens tokens) const override {
    Tokens out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&]() {
      if (count == 0) return;
      if (utf8::is_valid(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < count; ++i) out.push_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (std::string& t : tokens) {
      unsigned char b = 0;
      if (parse_byte_token(t, &b)) {
        bytes.push_back(static_cast<char>(b));
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder : public Decoder {
 public:
  Tokens decode_chain(Tokens tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  // Removes up to start_/stop_ leading/trailing copies of content_ from each token.
  Tokens decode_chain(Tokens tokens) const override {
    for (std::string& t : tokens) {
      for (size_t i = 0; i < start_ && t.compare(0, content_.size(), content_) == 0 && !t.empty(); ++i) {
        t.erase(0, content_.size());
      }
      for (size_t i = 0; i < stop_ && t.size() >= content_.size() &&
                         t.compare(t.size() - content_.size(), content_.size(), content_) == 0 && !t.empty();
           ++i) {
        t.erase(t.size() - content_.size());
      }
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  Tokens decode_chain(Tokens tokens) const override {
    // As in Hugging Face: every replacement char of the FIRST token is dropped (not only a
    // leading one) unless prepend_scheme is "never"; elsewhere it becomes a space.
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = replace_all(std::move(tokens[i]), replacement_, i == 0 && strip_first_ ? "" : " ");
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// BERT's WordPiece decoder: continuation pieces lose their prefix, other pieces after the first
// get a leading space; cleanup removes the space before punctuation and English contractions.
class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  Tokens decode_chain(Tokens tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i > 0) {
        if (!prefix_.empty() && t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t = std::string(" ").append(t);
      }
      if (cleanup_) {
        for (const auto& [from, to] : kCleanup) t = replace_all(std::move(t), from, to);
      }
    }
    return tokens;
  }

 private:
  static constexpr std::pair<const char*, const char*> kCleanup[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string prefix_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  Tokens decode_chain(Tokens tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> make_decoder(const json& spec) {
  using Ptr = std::unique_ptr<Decoder>;
  if (spec.is_null()) return Ptr();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return invalid_argument("tokenizer.json decoder must be an object with a string 'type'");
  }
  const std::string type = spec["type"];
  if (type == "ByteLevel") return Ptr(new ByteLevelDecoder());
  if (type == "ByteFallback") return Ptr(new ByteFallbackDecoder());
  if (type == "Fuse") return Ptr(new FuseDecoder());
  if (type == "Replace") {
    if (!spec.contains("content") || !spec["content"].is_string()) {
      return invalid_argument("Replace decoder needs a string 'content'");
    }
    const std::string content = spec["content"];
    const json& pattern = spec.value("pattern", json());
    if (pattern.contains("String") && pattern["String"].is_string()) {
      return Ptr(new ReplaceDecoder(pattern["String"], std::nullopt, content));
    }
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      RLM_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern["Regex"].get<std::string>()));
      return Ptr(new ReplaceDecoder("", std::move(re), content));
    }
    return invalid_argument("Replace decoder needs pattern.String or pattern.Regex");
  }
  if (type == "Strip") {
    return Ptr(new StripDecoder(spec.value("content", " "), spec.value("start", size_t{0}), spec.value("stop", size_t{0})));
  }
  if (type == "WordPiece") {
    return Ptr(new WordPieceDecoder(spec.value("prefix", "##"), spec.value("cleanup", true)));
  }
  if (type == "Metaspace") {
    const std::string scheme = spec.value("prepend_scheme", spec.value("add_prefix_space", true) ? "always" : "never");
    return Ptr(new MetaspaceDecoder(spec.value("replacement", "\u2581"), scheme != "never"));
  }
  if (type == "Sequence") {
    if (!spec.contains("decoders") || !spec["decoders"].is_array()) {
      return invalid_argument("Sequence decoder needs a 'decoders' array");
    }
    std::vector<Ptr> parts;
    for (const json& p : spec["decoders"]) {
      RLM_ASSIGN_OR_RETURN(Ptr q, make_decoder(p));
      if (q) parts.push_back(std::move(q));
    }
    return Ptr(new SequenceDecoder(std::move(parts)));
  }
  return unimplemented("unsupported tokenizer.json decoder type '" + type + "'");
}

std::string run_decoder(const Decoder* decoder, std::vector<std::string> tokens) {
  std::string out;
  if (decoder == nullptr) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return utf8::sanitize(out);
  }
  for (const std::string& t : decoder->decode_chain(std::move(tokens))) out += t;
  return utf8::sanitize(out);
}

}  // namespace rlm
