// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition), for the NFC normalizer that Qwen2/Qwen3 tokenizer.json files use.
#pragma once

#include <string>
#include <string_view>

namespace rlm {

// NFC of valid UTF-8 text.
std::string nfc_normalize(std::string_view text);

}  // namespace rlm
