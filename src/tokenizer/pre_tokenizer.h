// tokenizer.json pre-tokenizers: Split, ByteLevel, Digits, Punctuation, Metaspace, Sequence,
// BertPreTokenizer. A pre-tokenizer refines a list of pieces (the words the model tokenizes separately).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace rlm {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits/transforms `pieces` in place. `first_segment` is true for the text before the first
  // added token (Metaspace's prepend_scheme "first" needs it). Empty pieces are dropped.
  virtual void pre_tokenize(std::vector<std::string>& pieces, bool first_segment) const = 0;
};

// Builds the pre-tokenizer of a tokenizer.json "pre_tokenizer" object; null gives nullptr.
StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& spec);

// GPT-2's split regex (the ByteLevel pre-tokenizer with use_regex=true).
extern const char* const kGpt2SplitRegex;

}  // namespace rlm
