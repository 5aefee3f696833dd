// GPT-2 byte-level alphabet: every byte maps to one printable code point (bytes_to_unicode),
// so byte-level BPE vocabularies are plain strings. Used by the ByteLevel pre-tokenizer and
// decoder.
#pragma once

#include <string>
#include <string_view>

namespace rlm::byte_level {

// Each byte of `bytes` replaced by the UTF-8 of its byte-level code point.
std::string encode(std::string_view bytes);

// Maps each code point of `token` (valid UTF-8) back to its byte. Returns false (and leaves
// `out` unchanged) when some code point is outside the byte-level alphabet.
bool decode(std::string_view token, std::string* out);

}  // namespace rlm::byte_level
