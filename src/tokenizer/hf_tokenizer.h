// A Hugging Face tokenizer.json with a BPE or WordPiece model: added tokens -> normalizer ->
// pre-tokenizer -> model -> post-processor (TemplateProcessing / ByteLevel / Roberta / Bert / Sequence) for
// encode, and decoder chains for decode. tokenizer_config.json next to it supplies bos/eos and add_bos_token
// / add_eos_token (applied only where the post-processor does not already add that token).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_model.h"
#include "tokenizer/tokenizer.h"

namespace rlm {

class HfTokenizer : public Tokenizer {
 public:
  // `config` is the parsed tokenizer_config.json, or null.
  static StatusOr<std::unique_ptr<HfTokenizer>> from_json(const nlohmann::json& tokenizer,
                                                          const nlohmann::json& config);
  // Reads `path` (a tokenizer.json) and the tokenizer_config.json in the same directory.
  static StatusOr<std::unique_ptr<HfTokenizer>> load(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true,
                              bool allow_special = true) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  bool is_special(int32_t id) const override;

 private:
  HfTokenizer() = default;
  // Normalize, pre-tokenize and BPE one piece of text that holds no raw-matched added token.
  void encode_piece(const std::string& text, bool first_segment, bool allow_special,
                    std::vector<int32_t>& out) const;

  AddedVocabulary added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // added around a single sequence
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace rlm
