// Splits a template into data and tag tokens exactly as jinja2's lexer does with
// trim_blocks / lstrip_blocks, `-`/`+` whitespace control, comments, raw blocks and newline
// normalisation (keep_trailing_newline=False).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rlm::jinja {

enum class TokenType {
  kData,        // literal template text (already whitespace-trimmed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value is the unescaped string
  kInteger,
  kFloat,
  kOperator,
  kEof,
  kError,       // a lexical error; value is the message. The parser raises it only when it reaches
                // this point, so errors come out in the same order as jinja2's lazy lexer.
};

struct Token {
  TokenType type;
  std::string value;
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in code points... approximated by bytes
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Unterminated tags, comments, raw blocks and strings, unbalanced brackets and characters jinja2
// does not accept end the stream with a kError token (then kEof).
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace rlm::jinja
