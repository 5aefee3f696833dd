#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/hf_unicode_tables.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"

namespace rlm {

const char* const kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

// Hugging Face's punctuation test (ASCII punctuation or a Unicode P* character, with the
// tokenizers package's Unicode data) as a character class.
std::string punctuation_class() {
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < hf_tables::kPunctuationSize; ++i) {
    const auto& r = hf_tables::kPunctuation[i];
    std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", static_cast<unsigned>(r.first),
                  static_cast<unsigned>(r.last));
    out += buf;
  }
  return out + "]";
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool is_match;
};

// Hugging Face's NormalizedString::split for one piece: the alternating match/non-match spans
// of `text`, combined according to `behavior`.
std::vector<std::string> split_piece(const std::string& text, const Regex& re, SplitBehavior behavior,
                                     bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : re.find_all(text)) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) if (!s.is_match) out.push_back(s);
      break;
    case SplitBehavior::kIsolated:
      out = spans;
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty()) out.back().end = s.end;
        else out.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) out.back().begin = it->begin;
        else out.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (size_t i = 0; i < spans.size(); ++i) {
        if (i > 0 && spans[i].is_match == previous_match) out.back().end = spans[i].end;
        else out.push_back(spans[i]);
        previous_match = spans[i].is_match;
      }
      break;
  }
  std::vector<std::string> pieces;
  for (const Span& s : out) {
    if (s.end > s.begin) pieces.push_back(text.substr(s.begin, s.end - s.begin));
  }
  return pieces;
}

void split_all(std::vector<std::string>& pieces, const Regex& re, SplitBehavior behavior, bool invert) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) {
    for (std::string& q : split_piece(p, re, behavior, invert)) out.push_back(std::move(q));
  }
  pieces = std::move(out);
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    split_all(pieces, re_, behavior_, invert_);
  }

 private:
  Regex re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    if (add_prefix_space_) {
      for (std::string& p : pieces) if (p.empty() || p[0] != ' ') p.insert(0, " ");
    }
    if (re_) split_all(pieces, *re_, SplitBehavior::kIsolated, false);
    for (std::string& p : pieces) p = byte_level::encode(p);
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> re_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kNever, kFirst };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split, Regex re)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split), re_(std::move(re)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool first_segment) const override {
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& p = pieces[i];
      p = replace_all(std::move(p), " ", replacement_);
      const bool want = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && first_segment && i == 0);
      if (want && p.compare(0, replacement_.size(), replacement_) != 0) p.insert(0, replacement_);
    }
    if (split_) split_all(pieces, re_, SplitBehavior::kMergedWithNext, false);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  Regex re_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool first_segment) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces, first_segment);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

StatusOr<SplitBehavior> parse_behavior(const json& spec, const char* fallback = "") {
  const std::string b = spec.value("behavior", fallback);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("Split pre-tokenizer has unknown behavior '" + b + "'");
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& spec) {
  using Ptr = std::unique_ptr<PreTokenizer>;
  if (spec.is_null()) return Ptr();
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return invalid_argument("tokenizer.json pre_tokenizer must be an object with a string 'type'");
  }
  const std::string type = spec["type"];
  if (type == "Split") {
    const json& pattern = spec.value("pattern", json());
    std::string re_text;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) re_text = pattern["Regex"];
    else if (pattern.contains("String") && pattern["String"].is_string()) re_text = regex_escape(pattern["String"]);
    else return invalid_argument("Split pre-tokenizer needs pattern.Regex or pattern.String");
    RLM_ASSIGN_OR_RETURN(Regex re, Regex::compile(re_text));
    RLM_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(spec));
    return Ptr(new SplitPreTokenizer(std::move(re), behavior, spec.value("invert", false)));
  }
  if (type == "ByteLevel") {
    std::optional<Regex> re;
    if (spec.value("use_regex", true)) {
      RLM_ASSIGN_OR_RETURN(Regex r, Regex::compile(kGpt2SplitRegex));
      re = std::move(r);
    }
    return Ptr(new ByteLevelPreTokenizer(spec.value("add_prefix_space", true), std::move(re)));
  }
  if (type == "Digits") {
    RLM_ASSIGN_OR_RETURN(Regex re, Regex::compile(R"(\p{N})"));
    const auto behavior = spec.value("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    return Ptr(new SplitPreTokenizer(std::move(re), behavior, false));
  }
  if (type == "Punctuation") {
    RLM_ASSIGN_OR_RETURN(Regex re, Regex::compile(punctuation_class()));
    RLM_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(spec, "Isolated"));
    return Ptr(new SplitPreTokenizer(std::move(re), behavior, false));
  }
  if (type == "BertPreTokenizer") {  // white space removed, punctuation isolated
    RLM_ASSIGN_OR_RETURN(Regex space, Regex::compile(R"(\s)"));
    RLM_ASSIGN_OR_RETURN(Regex punct, Regex::compile(punctuation_class()));
    std::vector<Ptr> parts;
    parts.emplace_back(new SplitPreTokenizer(std::move(space), SplitBehavior::kRemoved, false));
    parts.emplace_back(new SplitPreTokenizer(std::move(punct), SplitBehavior::kIsolated, false));
    return Ptr(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Metaspace") {
    const std::string replacement = spec.value("replacement", "\u2581");
    const std::string scheme = spec.value("prepend_scheme", spec.value("add_prefix_space", true) ? "always" : "never");
    MetaspacePreTokenizer::Prepend prepend;
    if (scheme == "always") prepend = MetaspacePreTokenizer::Prepend::kAlways;
    else if (scheme == "never") prepend = MetaspacePreTokenizer::Prepend::kNever;
    else if (scheme == "first") prepend = MetaspacePreTokenizer::Prepend::kFirst;
    else return invalid_argument("Metaspace pre-tokenizer has unknown prepend_scheme '" + scheme + "'");
    RLM_ASSIGN_OR_RETURN(Regex re, Regex::compile(regex_escape(replacement)));
    return Ptr(new MetaspacePreTokenizer(replacement, prepend, spec.value("split", true), std::move(re)));
  }
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array()) {
      return invalid_argument("Sequence pre-tokenizer needs a 'pretokenizers' array");
    }
    std::vector<Ptr> parts;
    for (const json& p : spec["pretokenizers"]) {
      RLM_ASSIGN_OR_RETURN(Ptr q, make_pre_tokenizer(p));
      if (q) parts.push_back(std::move(q));
    }
    return Ptr(new SequencePreTokenizer(std::move(parts)));
  }
  return unimplemented("unsupported tokenizer.json pre_tokenizer type '" + type + "'");
}

}  // namespace rlm
