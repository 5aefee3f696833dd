// Python `str` character classes for the template interpreter: templates strip, split and
// case-map strings by code point (UTF-8 decoding itself is core/utf8.h), and "whitespace" means
// Python's str.isspace().
#pragma once

namespace rlm::jinja {

// Python str.isspace() for one code point.
bool py_isspace(char32_t cp);
// Python str.isprintable() approximation used by repr() (control, separators, format characters).
bool py_isprintable(char32_t cp);
// Simple (one-to-one) case mapping over ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
char32_t py_toupper(char32_t cp);
char32_t py_tolower(char32_t cp);
bool py_isupper(char32_t cp);
bool py_islower(char32_t cp);
bool py_isalpha(char32_t cp);
bool py_isdigit(char32_t cp);

}  // namespace rlm::jinja
