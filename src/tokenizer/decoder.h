// tokenizer.json decoders: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, WordPiece,
// Sequence.
// As in Hugging Face, a decoder maps the list of token strings to a new list (decode_chain) and
// the final text is their concatenation; without a decoder, tokens are joined with spaces.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace rlm {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// Builds the decoder of a tokenizer.json "decoder" object; null gives nullptr.
StatusOr<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& spec);

// The final text for `tokens`: decode_chain then concatenation (joined by " " when `decoder`
// is null). The result is valid UTF-8 (invalid bytes become U+FFFD).
std::string run_decoder(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace rlm
