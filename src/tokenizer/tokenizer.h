// Text <-> token ids. Implementations: HfTokenizer (tokenizer.json with a BPE model),
// SentencePieceTokenizer (tokenizer.model), and GGUF vocabularies. All are immutable after
// loading and safe to use from several threads at once.
//
// Invalid UTF-8 input is replaced like Python's bytes.decode("utf-8", errors="replace") before
// tokenization (see utf8.h). decode() always returns valid UTF-8 and ignores ids that are not in
// the vocabulary (a model's padded vocab rows), as Hugging Face does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rlm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`. add_special_tokens: add what the post-processor / config says (e.g.
  // bos). allow_special: special-token strings in the text become their special token (Hugging
  // Face's default); when false they are tokenized as plain text (encode_special_tokens=True).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true,
                                      bool allow_special = true) const = 0;

  // Text of `ids`; special tokens are left out when skip_special_tokens.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;

  // The vocabulary string of `id` (byte-level / SentencePiece form), nullopt when out of range.
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // One past the largest valid id.
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // True for special (control) tokens: the ones skip_special_tokens drops.
  virtual bool is_special(int32_t id) const = 0;
};

// Loads a tokenizer from a model directory (tokenizer.json preferred, else tokenizer.model),
// a tokenizer.json / tokenizer.model file, or a .gguf file (its embedded vocabulary).
StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_path);

}  // namespace rlm
