// Added tokens of a tokenizer.json ("added_tokens"): matched in the text before normalization
// and pre-tokenization, leftmost-longest like Hugging Face's Aho-Corasick matcher, so they are
// never produced by merges of ordinary text. Special ones can be switched off per call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace rlm {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;  // matched in the normalized text instead of the raw text
};

class AddedVocabulary {
 public:
  static StatusOr<AddedVocabulary> from_json(const nlohmann::json& added_tokens);

  // A piece of text, or an added token (id >= 0).
  struct Segment {
    std::string text;
    int32_t id = -1;
  };
  // Splits `text` on the added tokens whose `normalized` flag equals `normalized`. When
  // !allow_special, special tokens are not matched (their text stays ordinary text).
  std::vector<Segment> split(std::string_view text, bool normalized, bool allow_special) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  bool has_normalized_tokens() const { return has_normalized_; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct TrieNode {
    std::unordered_map<unsigned char, int> children;
    int token = -1;  // index into tokens_
  };
  // Longest token starting at text[pos] among tokens with this `normalized` flag; -1 if none.
  int longest_match(std::string_view text, size_t pos, bool normalized) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  std::vector<TrieNode> trie_[2];  // [normalized]
  bool has_normalized_ = false;
};

}  // namespace rlm
