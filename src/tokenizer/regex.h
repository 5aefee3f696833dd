// PCRE2 regular expressions (UTF + UCP, JIT when available) for the Split pre-tokenizer,
// the ByteLevel regex and regex-based normalizers/decoders.
//
// Hugging Face tokenizers uses Oniguruma, where \s is the Unicode White_Space property; PCRE2's
// \s differs (it includes U+180E). translate_pattern() rewrites \s and \S into explicit
// White_Space classes so both engines split identically.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace rlm {

class Regex {
 public:
  // Compiles an Oniguruma-style pattern (translated with translate_pattern).
  static StatusOr<Regex> compile(const std::string& pattern);

  // Non-overlapping matches, left to right, as [begin, end) byte offsets into valid UTF-8 text.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

// `pattern` with \s / \S replaced by explicit Unicode White_Space classes.
std::string translate_pattern(const std::string& pattern);

}  // namespace rlm
