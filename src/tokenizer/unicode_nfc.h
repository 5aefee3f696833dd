// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition), for the NFC normalizer that Qwen2/Qwen3 tokenizer.json files use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rlm {

// NFC of valid UTF-8 text.
std::string nfc_normalize(std::string_view text);

// The canonical combining class of `cp` (0 for starters).
uint8_t combining_class(char32_t cp);
// Canonical ordering: stable-sorts each run of non-starters by combining class.
void canonical_order(std::u32string& cps);

}  // namespace rlm
