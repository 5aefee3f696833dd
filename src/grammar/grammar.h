// Grammar-constrained decoding on xgrammar's C++ core (third_party/xgrammar, unpacked from its PyPI
// source distribution by scripts/setup.sh). A GrammarCompiler knows the model's vocabulary (every
// token's bytes) and compiles what a request asks for — a JSON schema, any JSON object, a regex, an
// EBNF grammar or a structural tag — into a CompiledGrammar, shared by every sequence of the
// request. Each sequence then runs its own GrammarMatcher: before a step the matcher fills the
// sequence's bitmask of allowed next tokens (on the host; the sampler applies it to the logits on
// their device), after the step it accepts the sampled token. The stop tokens (the model's EOS ids)
// are allowed exactly when the grammar is complete; accepting one terminates the matcher.
// docs/design/structured_output.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace rlm {
class Tokenizer;
}

namespace rlm::grammar {

enum class GrammarKind {
  kNone,
  kJsonObject,     // any JSON object (response_format json_object)
  kJsonSchema,     // source: a JSON schema (response_format json_schema, guided_json)
  kRegex,          // source: a regular expression (SGLang/vLLM regex, guided_regex)
  kEbnf,           // source: an EBNF grammar in xgrammar's GBNF dialect, root rule `root` (ebnf, guided_grammar)
  kStructuralTag,  // source: an xgrammar structural tag (tool_choice required / named function)
};

// What a request constrains its output to.
struct GrammarSpec {
  GrammarKind kind = GrammarKind::kNone;
  std::string source;
  bool strict = true;  // JSON schema: properties not listed are not allowed unless the schema allows them
  bool active() const { return kind != GrammarKind::kNone; }
};

const char* grammar_kind_name(GrammarKind kind);

// 32-bit words of one bitmask row over `vocab_size` tokens: bit (t % 32) of word t / 32 is token t.
int64_t bitmask_words(int64_t vocab_size);

// A grammar compiled against one vocabulary; immutable and shared between threads.
class CompiledGrammar;
int64_t grammar_vocab_size(const CompiledGrammar& grammar);

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&) = delete;
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // Writes the allowed next tokens into `words` (bitmask_words(vocab_size) int32 words). A
  // terminated matcher allows every token (its row is dropped by the scheduler anyway).
  void fill_next_token_bitmask(int32_t* words);
  // Advances by `token`; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  // A stop token was accepted: nothing may follow.
  bool terminated() const;
  int64_t vocab_size() const;

  // Fills the rows of several matchers at once (xgrammar's thread pool): row i of `words`
  // (bitmask_words(vocab) apart) for matchers[i].
  static void fill_batch(const std::vector<GrammarMatcher*>& matchers, int32_t* words);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Compiles grammars for one model: its tokenizer's vocabulary padded to the model's vocab_size
// (ids past the tokenizer's are never allowed), special tokens never allowed, stop_ids allowed at
// the end. Thread-safe (the HTTP threads compile concurrently); compiled grammars are cached.
class GrammarCompiler {
 public:
  GrammarCompiler(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids);
  ~GrammarCompiler();

  // kInvalidArgument naming the problem for a bad schema / regex / grammar.
  StatusOr<std::shared_ptr<const CompiledGrammar>> compile(const GrammarSpec& spec) const;
  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t vocab_size_;
  std::vector<int32_t> stop_ids_;
};

// The vocabulary as xgrammar reads it: each id's token string in the tokenizer's own encoding
// (byte-level "Ġ", SentencePiece "▁"/<0x0A>, or raw), "" for special tokens and ids without one.
// vocab_type: 0 raw, 1 byte fallback, 2 byte level (xgrammar::VocabType).
struct EncodedVocab {
  std::vector<std::string> tokens;
  int vocab_type = 0;
};
EncodedVocab encoded_vocab(const Tokenizer& tokenizer);

}  // namespace rlm::grammar
