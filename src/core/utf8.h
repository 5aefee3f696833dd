// UTF-8 helpers for the whole code base: the tokenizers and the incremental detokenizer (byte-exact
// Hugging Face behaviour) and the Jinja interpreter (Python `str` semantics: templates index, slice
// and measure strings by code point).
//
// Invalid UTF-8 policy: text handed to a tokenizer is first made valid with
// sanitize_utf8(), which replaces every maximal ill-formed subsequence with U+FFFD exactly
// like Python's bytes.decode("utf-8", errors="replace") (and Rust's String::from_utf8_lossy).
// Hugging Face tokenizers work on Rust strings, so this is what they see for the same bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rlm::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 when the bytes there are
// not a complete well-formed sequence.
size_t valid_sequence_length(std::string_view s, size_t i);

// True when `s` is entirely well-formed UTF-8.
bool is_valid(std::string_view s);

// `s` with every maximal ill-formed subsequence replaced by U+FFFD (Python errors="replace").
std::string sanitize(std::string_view s);

// Appends the UTF-8 encoding of `cp` to `out`.
void append(std::string& out, char32_t cp);

// Decodes UTF-8 into code points; every byte that does not start a well-formed sequence decodes
// as one U+FFFD (never throws). Valid input (e.g. after sanitize) decodes exactly.
std::u32string decode(std::string_view s);

// Encodes code points as UTF-8.
std::string encode(std::u32string_view cps);

// Number of code points decode(s) gives (Python's len() of the decoded string).
size_t length(std::string_view s);

// Number of bytes at the end of `s` that form an incomplete (but so far well-formed) prefix of
// a multi-byte sequence; 0 when `s` ends on a character boundary.
size_t incomplete_suffix_length(std::string_view s);

}  // namespace rlm::utf8
