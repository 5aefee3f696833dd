#include "tokenizer/wordpiece_model.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/utf8.h"

namespace rlm {

using nlohmann::json;

StatusOr<std::unique_ptr<WordPieceModel>> WordPieceModel::from_json(const json& model) {
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return invalid_argument("tokenizer.json WordPiece model has no 'vocab' object");
  }
  std::unique_ptr<WordPieceModel> m(new WordPieceModel());
  RLM_RETURN_IF_ERROR(read_vocab(model["vocab"], m->vocab_, m->id_to_token_, m->has_id_));
  const json unk = model.value("unk_token", json("[UNK]"));
  if (!unk.is_string() || !m->vocab_.contains(unk.get<std::string>())) {
    return invalid_argument("tokenizer.json WordPiece unk_token is missing from the vocab");
  }
  m->unk_id_ = m->vocab_.at(unk.get<std::string>());
  const json prefix = model.value("continuing_subword_prefix", json("##"));
  if (!prefix.is_string())
    return invalid_argument("tokenizer.json WordPiece continuing_subword_prefix must be a string");
  m->prefix_ = prefix.get<std::string>();
  const json max_chars = model.value("max_input_chars_per_word", json(100));
  if (!max_chars.is_number_integer() || max_chars.get<int64_t>() < 0) {
    return invalid_argument(
        "tokenizer.json WordPiece max_input_chars_per_word must be a non-negative integer");
  }
  m->max_chars_ = max_chars.get<size_t>();
  return m;
}

void WordPieceModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  size_t chars = 0;
  for (size_t i = 0; i < word.size(); i += std::max<size_t>(1, utf8::valid_sequence_length(word, i))) ++chars;
  if (chars > max_chars_) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first = out.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    // The longest piece starting at `start`, shrinking one character at a time.
    size_t end = word.size();
    int32_t found = -1;
    while (end > start) {
      piece.assign(start > 0 ? prefix_ : std::string());
      piece.append(word.substr(start, end - start));
      if (auto it = vocab_.find(piece); it != vocab_.end()) {
        found = it->second;
        break;
      }
      do --end;
      while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::optional<int32_t> WordPieceModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* WordPieceModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

}  // namespace rlm
