// UTF-8 helpers with Python `str` semantics: templates index, slice, strip and case-map strings by
// code point, and "whitespace" means Python's str.isspace().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rlm::jinja {

// Decodes UTF-8 into code points. Invalid bytes decode as U+FFFD (one per byte), never throw.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view cps);
void utf8_append(std::string& out, char32_t cp);
// Number of code points (what Python's len() gives for the decoded string).
size_t utf8_length(std::string_view s);

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
