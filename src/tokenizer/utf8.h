// UTF-8 helpers shared by the tokenizers and the incremental detokenizer.
//
// Invalid UTF-8 policy: text handed to a tokenizer is first made valid with
// sanitize_utf8(), which replaces every maximal ill-formed subsequence with U+FFFD exactly
// like Python's bytes.decode("utf-8", errors="replace") (and Rust's String::from_utf8_lossy).
// Hugging Face tokenizers work on Rust strings, so this is what they see for the same bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

// Decodes valid UTF-8 (call sanitize first) into code points.
std::vector<char32_t> decode(std::string_view s);

// Encodes code points as UTF-8.
std::string encode(const std::vector<char32_t>& cps);

// Number of bytes at the end of `s` that form an incomplete (but so far well-formed) prefix of
// a multi-byte sequence; 0 when `s` ends on a character boundary.
size_t incomplete_suffix_length(std::string_view s);

}  // namespace rlm::utf8
