// SentencePiece models (Llama-2 / Mistral tokenizer.model) through libsentencepiece.
//
// encode: with allow_special, the text is first split on control-piece strings (<s>, </s>),
// leftmost-longest; each ordinary segment is encoded by SentencePiece on its own (so each gets
// the dummy-prefix space, like transformers' legacy Llama tokenizer). add_special_tokens adds
// bos (and eos) per tokenizer_config.json add_bos_token (default true) / add_eos_token (default
// false). decode: control tokens are written as their piece text unless skipped; each run of
// ordinary ids is decoded by SentencePiece, keeping its leading space unless the output is
// still empty ([bos] + "Hello" -> "<s> Hello").
#pragma once

#include <memory>
#include <string>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace rlm {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Loads `path` (a tokenizer.model) and the tokenizer_config.json in the same directory.
  static StatusOr<std::unique_ptr<SentencePieceTokenizer>> load(const std::string& path);
  ~SentencePieceTokenizer() override;

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
  SentencePieceTokenizer();

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  AddedVocabulary controls_;
  std::optional<int32_t> bos_id_, eos_id_;
  bool add_bos_ = true, add_eos_ = false;
};

}  // namespace rlm
