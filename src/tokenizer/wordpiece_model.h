// The WordPiece model of a tokenizer.json (BERT): greedy longest-match-first over each word, with
// continuation pieces spelled `continuing_subword_prefix` + piece ("##"); a word with a part no
// piece matches, or longer than max_input_chars_per_word characters, becomes the unk token.
#pragma once

#include <unordered_map>

#include "tokenizer/token_model.h"

namespace rlm {

class WordPieceModel : public TokenModel {
 public:
  static StatusOr<std::unique_ptr<WordPieceModel>> from_json(const nlohmann::json& model);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  WordPieceModel() = default;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  int32_t unk_id_ = 0;
  std::string prefix_;
  size_t max_chars_ = 100;
};

}  // namespace rlm
