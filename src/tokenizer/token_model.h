// The model step of a tokenizer.json: one pre-tokenized word -> token ids. Implementations:
// BpeModel ("BPE") and WordPieceModel ("WordPiece").
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace rlm {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-tokenized word to `out`.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The vocabulary string of `id`, or nullptr when the id is not in the vocabulary.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // One past the largest id in the vocabulary.
  virtual int32_t vocab_size() const = 0;
};

// The model of a tokenizer.json "model" object (type BPE when absent); unknown types give
// kUnimplemented.
StatusOr<std::unique_ptr<TokenModel>> make_token_model(const nlohmann::json& spec);

// Reads a model's "vocab" object (token -> id; ids may have gaps) into `ids`, and `tokens` /
// `has_id` indexed by id.
Status read_vocab(const nlohmann::json& vocab, std::unordered_map<std::string, int32_t>& ids,
                  std::vector<std::string>& tokens, std::vector<bool>& has_id);

}  // namespace rlm
