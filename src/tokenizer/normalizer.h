// tokenizer.json normalizers: NFC, Prepend, Replace (string or regex pattern), Strip,
// BertNormalizer, Sequence. Each works on valid UTF-8 text. Offsets are not tracked (radixlm needs ids only).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace rlm {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object; a null `spec`
// gives nullptr (no normalization). Unknown types give kUnimplemented.
StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& spec);

// Replaces every occurrence of `from` (non-empty) in `text` by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to);

}  // namespace rlm
