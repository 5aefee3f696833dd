#include "tokenizer/token_model.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/bpe_model.h"
#include "tokenizer/wordpiece_model.h"

namespace rlm {

using nlohmann::json;

StatusOr<std::unique_ptr<TokenModel>> make_token_model(const json& spec) {
  if (!spec.is_object()) return invalid_argument("tokenizer.json 'model' must be an object");
  const std::string type = spec.value("type", "BPE");
  if (type == "BPE") {
    RLM_ASSIGN_OR_RETURN(BpeModel m, BpeModel::from_json(spec));
    return std::unique_ptr<TokenModel>(new BpeModel(std::move(m)));
  }
  if (type == "WordPiece") {
    RLM_ASSIGN_OR_RETURN(auto m, WordPieceModel::from_json(spec));
    return std::unique_ptr<TokenModel>(std::move(m));
  }
  return unimplemented("unsupported tokenizer.json model type '" + type + "' (BPE, WordPiece)");
}

Status read_vocab(const json& vocab, std::unordered_map<std::string, int32_t>& ids,
                  std::vector<std::string>& tokens, std::vector<bool>& has_id) {
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX - 1) {
      return invalid_argument("tokenizer.json vocab entry '" + it.key() + "' has an invalid id");
    }
    const auto id = it.value().get<int32_t>();
    ids[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  tokens.assign(max_id + 1, std::string());
  has_id.assign(max_id + 1, false);
  for (const auto& [tok, id] : ids) {
    tokens[id] = tok;
    has_id[id] = true;
  }
  return Status::ok();
}

}  // namespace rlm
