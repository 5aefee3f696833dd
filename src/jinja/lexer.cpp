#include "jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "core/utf8.h"
#include "jinja/py_str.h"

namespace rlm::jinja {
namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python str.rstrip() with no arguments.
std::string py_rstrip(std::string_view s) {
  std::u32string cps = utf8::decode(s);
  while (!cps.empty() && py_isspace(cps.back())) cps.pop_back();
  return utf8::encode(cps);
}

// True when `s` is non-empty and all Python whitespace (regex `\s+` fullmatch).
bool all_space(std::string_view s) {
  if (s.empty()) return false;
  for (char32_t cp : utf8::decode(s)) {
    if (!py_isspace(cp)) return false;
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    Status st = lex_root();
    if (!st.is_ok()) push(TokenType::kError, error_message_, error_pos_);
    // jinja2 gives the end-of-template token the line where the last token starts.
    Token eof{TokenType::kEof, "", 1, 1};
    if (!tokens_.empty()) {
      eof.line = tokens_.back().line;
      eof.column = tokens_.back().column;
    }
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  Status error_at(size_t pos, const std::string& message) {
    error_pos_ = pos;
    error_message_ = message;
    return invalid_argument(message);
  }

  std::pair<int, int> line_col(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    const size_t line_idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    const size_t start = line_starts_[line_idx];
    const int col = static_cast<int>(utf8::length(std::string_view(src_).substr(start, pos - start))) + 1;
    return {static_cast<int>(line_idx) + 1, col};
  }

  void push(TokenType type, std::string value, size_t pos) {
    auto [line, col] = line_col(pos);
    tokens_.push_back(Token{type, std::move(value), line, col});
  }

  // Emits the data before a tag, applying `-` stripping or lstrip_blocks.
  void emit_data(size_t begin, size_t end, char sign, bool is_variable) {
    std::string text = src_.substr(begin, end - begin);
    if (sign == '-') {
      text = py_rstrip(text);
    } else if (sign != '+' && opt_.lstrip_blocks && !is_variable) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(std::string_view(text).substr(l_pos))) text.resize(l_pos);
    }
    if (!text.empty()) push(TokenType::kData, std::move(text), begin);
  }

  size_t skip_space(size_t p) const {
    while (p < src_.size() && is_ascii_space(src_[p])) ++p;
    return p;
  }

  // `%}` handling shared by blocks, comments and endraw: returns the position after the tag end.
  size_t finish_block_end(size_t p, char sign) const {
    if (sign == '-') return skip_space(p);
    if (sign == '+') return p;
    if (opt_.trim_blocks && p < src_.size() && src_[p] == '\n') return p + 1;
    return p;
  }

  void set_line_starting(size_t end) { line_starting_ = end > 0 && src_[end - 1] == '\n'; }

  Status lex_root() {
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = std::string::npos;
      for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
        if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
          tag = i;
          break;
        }
      }
      if (tag == std::string::npos) {
        push(TokenType::kData, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      emit_data(pos, tag, sign, kind == '{');
      line_starting_ = false;
      Status st;
      if (kind == '#') {
        st = lex_comment(p, &pos);
      } else if (kind == '%' && is_raw_begin(p)) {
        st = lex_raw(p, &pos);
      } else {
        push(kind == '%' ? TokenType::kBlockBegin : TokenType::kVarBegin, "", tag);
        st = lex_tag(p, kind == '%', &pos);
      }
      if (!st.is_ok()) return st;
    }
    return Status::ok();
  }

  Status lex_comment(size_t p, size_t* out_pos) {
    const size_t q = src_.find("#}", p);
    if (q == std::string::npos) return error_at(p, "Missing end of comment tag");
    char sign = 0;
    if (q >= p + 1 && (src_[q - 1] == '-' || src_[q - 1] == '+')) sign = src_[q - 1];
    const size_t end = finish_block_end(q + 2, sign);
    set_line_starting(end);
    *out_pos = end;
    return Status::ok();
  }

  // After `{%` (and sign): `\s*raw\s*(-%}|%})`.
  bool is_raw_begin(size_t p) const {
    p = skip_space(p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_space(p + 3);
    return src_.compare(p, 3, "-%}") == 0 || src_.compare(p, 2, "%}") == 0;
  }

  Status lex_raw(size_t p, size_t* out_pos) {
    p = skip_space(skip_space(p) + 3);
    size_t body = 0;
    if (src_[p] == '-') body = skip_space(p + 3);
    else body = p + 2;
    set_line_starting(body);
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t q = i + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      q = skip_space(q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = skip_space(q + 6);
      char end_sign = 0;
      if (src_.compare(q, 3, "+%}") == 0 || src_.compare(q, 3, "-%}") == 0) {
        end_sign = src_[q];
        q += 3;
      } else if (src_.compare(q, 2, "%}") == 0) {
        q += 2;
      } else {
        continue;
      }
      emit_data(body, i, sign, false);
      const size_t end = finish_block_end(q, end_sign);
      set_line_starting(end);
      *out_pos = end;
      return Status::ok();
    }
    return error_at(p, "Missing end of raw directive");
  }

  Status lex_tag(size_t p, bool is_block, size_t* out_pos) {
    std::vector<char> stack;
    const size_t n = src_.size();
    while (true) {
      if (p >= n) {
        return error_at(n, std::string("unexpected end of template, expected end of ") +
                               (is_block ? "statement ('%}')" : "print statement ('}}')"));
      }
      if (stack.empty()) {
        if (is_block) {
          if (src_.compare(p, 3, "+%}") == 0 || src_.compare(p, 3, "-%}") == 0 || src_.compare(p, 2, "%}") == 0) {
            const char sign = src_[p] == '%' ? 0 : src_[p];
            push(TokenType::kBlockEnd, "", p);
            const size_t end = finish_block_end(p + (sign ? 3 : 2), sign);
            set_line_starting(end);
            *out_pos = end;
            return Status::ok();
          }
        } else if (src_.compare(p, 3, "-}}") == 0 || src_.compare(p, 2, "}}") == 0) {
          push(TokenType::kVarEnd, "", p);
          const size_t end = src_[p] == '-' ? skip_space(p + 3) : p + 2;
          set_line_starting(end);
          *out_pos = end;
          return Status::ok();
        }
      }
      const char c = src_[p];
      if (is_ascii_space(c)) {
        p = skip_space(p);
        continue;
      }
      if (is_digit(c)) {
        p = lex_number(p);
        continue;
      }
      if (is_name_start(c) || unicode_letter_at(p)) {
        size_t q = p;
        while (q < n && (is_name_char(src_[q]) || unicode_letter_at(q))) q += utf8_char_len(q);
        push(TokenType::kName, src_.substr(p, q - p), p);
        p = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < n && src_[q] != c) q += (src_[q] == '\\') ? 2 : 1;
        if (q >= n) return error_at(p, "unterminated string literal");
        StatusOr<std::string> s = unescape(p, src_.substr(p + 1, q - p - 1));
        if (!s.is_ok()) return s.status();
        push(TokenType::kString, std::move(s).value(), p);
        p = q + 1;
        continue;
      }
      static const char* kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (const char* two : kTwoChar) {
        if (src_.compare(p, 2, two) == 0) op = two;
      }
      if (op.empty() && std::string_view("+-/*%~[](){}=<>.:|,;").find(c) != std::string_view::npos) op = std::string(1, c);
      if (op.empty()) return error_at(p, "unexpected char '" + src_.substr(p, utf8_char_len(p)) + "'");
      if (op == "(" || op == "[" || op == "{") {
        stack.push_back(op == "(" ? ')' : (op == "[" ? ']' : '}'));
      } else if (op == ")" || op == "]" || op == "}") {
        if (stack.empty()) return error_at(p, "unexpected '" + op + "'");
        if (stack.back() != op[0]) return error_at(p, "unexpected '" + op + "', expected '" + std::string(1, stack.back()) + "'");
        stack.pop_back();
      }
      push(TokenType::kOperator, op, p);
      p += op.size();
    }
  }

  size_t utf8_char_len(size_t p) const {
    const auto c = static_cast<unsigned char>(src_[p]);
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return std::min(len, src_.size() - p);
  }

  // Non-ASCII letters are identifier characters (jinja2 names follow Python's str.isidentifier).
  bool unicode_letter_at(size_t p) const {
    if (static_cast<unsigned char>(src_[p]) < 0x80) return false;
    const std::u32string cp = utf8::decode(std::string_view(src_).substr(p, utf8_char_len(p)));
    return cp.size() == 1 && py_isalpha(cp[0]);
  }

  size_t scan_digits(size_t p) const {  // (\d+_)*\d+ ; p must be at a digit
    while (p < src_.size() && is_digit(src_[p])) {
      ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1])) ++p;
    }
    return p;
  }

  size_t lex_number(size_t p) {
    const size_t n = src_.size();
    const bool float_allowed = !(p > 0 && src_[p - 1] == '.');
    size_t d1 = scan_digits(p);
    size_t end = d1;
    bool is_float = false;
    if (float_allowed) {
      if (d1 + 1 < n && src_[d1] == '.' && is_digit(src_[d1 + 1])) {
        end = scan_digits(d1 + 1);
        is_float = true;
      }
      if (end < n && (src_[end] == 'e' || src_[end] == 'E')) {
        size_t q = end + 1;
        if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < n && is_digit(src_[q])) {
          end = scan_digits(q);
          is_float = true;
        }
      }
    }
    auto strip = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    if (is_float) {
      push(TokenType::kFloat, strip(src_.substr(p, end - p)), p);
      return end;
    }
    if (src_[p] == '0' && p + 1 < n && std::string_view("bBoOxX").find(src_[p + 1]) != std::string_view::npos) {
      const char base = static_cast<char>(src_[p + 1] | 0x20);
      size_t q = p + 2;
      while (q < n && (hex_value(src_[q]) >= 0 || src_[q] == '_')) {
        const int hv = hex_value(src_[q]);
        if (hv >= 0 && ((base == 'b' && hv > 1) || (base == 'o' && hv > 7))) break;
        ++q;
      }
      const std::string digits = strip(src_.substr(p + 2, q - p - 2));
      const int radix = base == 'b' ? 2 : (base == 'o' ? 8 : 16);
      push(TokenType::kInteger, std::to_string(std::strtoll(digits.c_str(), nullptr, radix)), p);
      return q;
    }
    if (src_[p] == '0') {
      size_t q = p + 1;
      while (q < n && (src_[q] == '0' || (src_[q] == '_' && q + 1 < n && src_[q + 1] == '0'))) ++q;
      push(TokenType::kInteger, "0", p);
      return q;
    }
    push(TokenType::kInteger, strip(src_.substr(p, d1 - p)), p);
    return d1;
  }

  // Python's "unicode-escape" decoding of a string literal body, as jinja2 does.
  StatusOr<std::string> unescape(size_t pos, const std::string& body) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out.push_back(body[i]);
        continue;
      }
      const char e = body[++i];
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': case 'u': case 'U': {
          const size_t len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          char32_t cp = 0;
          for (size_t k = 0; k < len; ++k) {
            const int hv = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
            if (hv < 0) return error_at(pos, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(hv);
          }
          if (cp > 0x10FFFF) return error_at(pos, "illegal Unicode character in string literal");
          utf8::append(out, cp);
          i += len;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = e - '0';
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
            }
            utf8::append(out, cp);
          } else if (e == 'N') {
            return error_at(pos, "\\N{...} escapes are not supported");
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
  size_t error_pos_ = 0;
  std::string error_message_;
};

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  Lexer lexer(normalize_newlines(source), options);
  return lexer.run();
}

}  // namespace rlm::jinja
