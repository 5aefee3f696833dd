#include "tokenizer/normalizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/hf_unicode_tables.h"
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

bool in_ranges(const hf_tables::Range* table, size_t size, char32_t cp) {
  const auto* end = table + size;
  const auto* it =
      std::upper_bound(table, end, cp, [](char32_t c, const hf_tables::Range& r) { return c < r.first; });
  return it != table && cp <= (it - 1)->last;
}

// Appends the mapping of `cp` in `table` (or `cp` itself) to `out`.
void append_mapped(const hf_tables::Mapping* table, size_t size, char32_t cp, std::u32string& out) {
  const auto* end = table + size;
  const auto* it =
      std::lower_bound(table, end, cp, [](const hf_tables::Mapping& m, char32_t c) { return m.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.append(hf_tables::kData + it->offset, it->length);
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Hugging Face's BertNormalizer: clean_text (drop control characters, white space -> " "),
// handle_chinese_chars (spaces around CJK ideographs), strip_accents (NFD, then drop nonspacing
// marks) and lowercase, in that order, with the Unicode data of the tokenizers package.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  std::string normalize(std::string text) const override {
    namespace bt = hf_tables;
    std::u32string cps;
    for (char32_t cp : utf8::decode(text)) {
      if (clean_) {
        if (in_ranges(bt::kRemoved, bt::kRemovedSize, cp)) continue;
        if (std::binary_search(bt::kSpace, bt::kSpace + bt::kSpaceSize, cp)) cp = U' ';
      }
      if (chinese_ && is_chinese_char(cp)) {
        cps += U' ';
        cps += cp;
        cps += U' ';
      } else {
        cps += cp;
      }
    }
    if (strip_) {
      std::u32string nfd;
      for (char32_t cp : cps) {
        if (cp >= 0xAC00 && cp < 0xAC00 + 11172) {  // Hangul syllable: L V (T)
          const char32_t s = cp - 0xAC00;
          nfd += static_cast<char32_t>(0x1100 + s / 588);
          nfd += static_cast<char32_t>(0x1161 + (s % 588) / 28);
          if (s % 28 != 0) nfd += static_cast<char32_t>(0x11A7 + s % 28);
        } else {
          append_mapped(bt::kNfd, bt::kNfdSize, cp, nfd);
        }
      }
      canonical_order(nfd);
      cps.clear();
      for (char32_t cp : nfd) {
        if (!in_ranges(bt::kMn, bt::kMnSize, cp)) cps += cp;
      }
    }
    if (lower_) {
      std::u32string lowered;
      for (char32_t cp : cps) append_mapped(bt::kLower, bt::kLowerSize, cp, lowered);
      cps = std::move(lowered);
    }
    return utf8::encode(cps);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
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
  if (type == "BertNormalizer") {
    auto flag = [&](const char* key, bool fallback) -> StatusOr<bool> {
      const json v = spec.value(key, json(fallback));
      if (v.is_null()) return fallback;
      if (!v.is_boolean())
        return invalid_argument(str("BertNormalizer '", key, "' must be a boolean or null"));
      return v.get<bool>();
    };
    RLM_ASSIGN_OR_RETURN(bool clean, flag("clean_text", true));
    RLM_ASSIGN_OR_RETURN(bool chinese, flag("handle_chinese_chars", true));
    RLM_ASSIGN_OR_RETURN(bool lower, flag("lowercase", true));
    RLM_ASSIGN_OR_RETURN(bool strip, flag("strip_accents", lower));  // null: follows lowercase
    return std::unique_ptr<Normalizer>(new BertNormalizer(clean, chinese, strip, lower));
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
