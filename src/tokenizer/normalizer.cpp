#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_nfc.h"

namespace rlm {
namespace {

using nlohmann::json;

class NfcNormalizer : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return nfc_normalize(text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  // Like Hugging Face: an empty string stays empty.
  std::string normalize(std::string text) const override {
    return text.empty() ? text : prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::optional<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(std::string text) const override {
    if (!regex_) return replace_all(std::move(text), literal_, content_);
    std::string out;
    size_t last = 0;
    for (auto [b, e] : regex_->find_all(text)) {
      out.append(text, last, b - last);
      out += content_;
      last = e;
    }
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

bool is_unicode_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override {
    const std::u32string cps = utf8::decode(text);
    size_t b = 0, e = cps.size();
    if (left_) while (b < e && is_unicode_white_space(cps[b])) ++b;
    if (right_) while (e > b && is_unicode_white_space(cps[e - 1])) --e;
    return utf8::encode(std::u32string_view(cps).substr(b, e - b));
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string text) const override {
    for (const auto& p : parts_) text = p->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

StatusOr<std::string> string_field(const json& spec, const char* key) {
  if (!spec.contains(key) || !spec[key].is_string()) {
    return invalid_argument(str("normalizer ", spec.value("type", "?"), " needs a string field '", key, "'"));
  }
  return spec[key].get<std::string>();
}

}  // namespace

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  std::string out;
  size_t last = 0;
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, last)) {
    out.append(text, last, pos - last);
    out += to;
    last = pos + from.size();
  }
  out.append(text, last, std::string::npos);
  return out;
}

StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return invalid_argument("tokenizer.json normalizer must be an object with a string 'type'");
  }
  const std::string type = spec["type"];
  if (type == "NFC") return std::unique_ptr<Normalizer>(new NfcNormalizer());
  if (type == "Prepend") {
    RLM_ASSIGN_OR_RETURN(std::string prefix, string_field(spec, "prepend"));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(prefix));
  }
  if (type == "Replace") {
    RLM_ASSIGN_OR_RETURN(std::string content, string_field(spec, "content"));
    const json& pattern = spec.value("pattern", json());
    if (pattern.contains("String") && pattern["String"].is_string()) {
      return std::unique_ptr<Normalizer>(new ReplaceNormalizer(pattern["String"], std::nullopt, content));
    }
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      RLM_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern["Regex"].get<std::string>()));
      return std::unique_ptr<Normalizer>(new ReplaceNormalizer("", std::move(re), content));
    }
    return invalid_argument("Replace normalizer needs pattern.String or pattern.Regex");
  }
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(spec.value("strip_left", true), spec.value("strip_right", true)));
  }
  if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array()) {
      return invalid_argument("Sequence normalizer needs a 'normalizers' array");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const json& p : spec["normalizers"]) {
      RLM_ASSIGN_OR_RETURN(auto n, make_normalizer(p));
      if (n) parts.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return unimplemented("unsupported tokenizer.json normalizer type '" + type + "'");
}

}  // namespace rlm
