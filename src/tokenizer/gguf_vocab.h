// Tokenizers from a GGUF file's embedded vocabulary (tokenizer.ggml.*).
//
//   tokenizer.ggml.model = "gpt2"  byte-level BPE: tokens + merges; the pre-tokenizer comes from
//                                  tokenizer.ggml.pre, mapped to the split rules of the Hugging
//                                  Face tokenizer.json the GGUF was converted from ("gpt-2"/"default",
//                                  "smollm"/"starcoder" = digits split individually first,
//                                  "llama-bpe" = Llama-3 regex + ignore_merges, "qwen2" = NFC +
//                                  Qwen2 regex). Unknown names are kUnimplemented.
//   tokenizer.ggml.model = "llama" SentencePiece-style BPE: tokens + scores (merge priority: the
//                                  merged piece's score, higher first), byte fallback, "▁" spaces,
//                                  tokenizer.ggml.add_space_prefix (default true).
// token_type 3 (control) becomes a special added token (2, unknown, too for gpt2 vocabularies;
// a llama-style unk stays a model token, as in SentencePieceTokenizer), 4 (user-defined) a
// non-special added token. bos/eos ids and tokenizer.ggml.add_bos_token / add_eos_token are honoured. The
// vocabulary is turned into the equivalent tokenizer.json and loaded by HfTokenizer.
#pragma once

#include <memory>

#include <nlohmann/json_fwd.hpp>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace rlm {

// The tokenizer.json (and a tokenizer_config.json-like object in *config) equivalent to the
// vocabulary in `file`.
StatusOr<nlohmann::json> gguf_vocab_to_tokenizer_json(const GgufFile& file, nlohmann::json* config);

StatusOr<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const GgufFile& file);

}  // namespace rlm
