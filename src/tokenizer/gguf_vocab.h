// Tokenizers from a GGUF file's embedded vocabulary (tokenizer.ggml.*), turned into the
// equivalent Hugging Face tokenizer.json and loaded by HfTokenizer.
//
//   tokenizer.ggml.model = "gpt2"   byte-level BPE: tokens + merges; the normalizer and
//                                   pre-tokenizer come from tokenizer.ggml.pre, mapped to those of
//                                   the tokenizer.json the GGUF was converted from (gpt-2/default,
//                                   mpt, starcoder/refact/smollm/codeshell, command-r, falcon,
//                                   deepseek-llm, deepseek-coder, llama-bpe/llama3, qwen2,
//                                   deepseek-r1-qwen, qwen35). Unknown names are kUnimplemented.
//   tokenizer.ggml.model = "llama"  SentencePiece-style BPE: tokens + scores (merge priority: the
//                                   merged piece's score, higher first), byte fallback, "▁" spaces,
//                                   tokenizer.ggml.add_space_prefix (default true).
//   tokenizer.ggml.model = "gemma4" BPE with stored merges, spaces -> "▁", no prefix, byte fallback.
//   tokenizer.ggml.model = "bert"   WordPiece ("▁" word starts and bare continuations turned back
//                                   into "##" pieces), BertNormalizer, BertPreTokenizer, [CLS]/[SEP].
// token_type 3 (control) becomes a special added token (2, unknown, too for gpt2 vocabularies;
// a llama-style unk stays a model token, as in SentencePieceTokenizer), 4 (user-defined) a
// non-special added token; Phi-3's added tokens strip white space on their right as in its
// tokenizer.json. bos/eos ids and tokenizer.ggml.add_bos_token / add_eos_token are honoured.
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
