#include "grammar/grammar.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "tokenizer/tokenizer.h"

namespace rlm::grammar {

class CompiledGrammar {
 public:
  explicit CompiledGrammar(xgrammar::CompiledGrammar g) : g(std::move(g)) {}
  xgrammar::CompiledGrammar g;
};

namespace {

// A [rows, words] int32 host tensor over `words` for xgrammar.
DLTensor bitmask_tensor(int32_t* words, int64_t* shape) {
  DLTensor t{};
  t.data = words;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

}  // namespace

const char* grammar_kind_name(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kNone: return "none";
    case GrammarKind::kJsonObject: return "json_object";
    case GrammarKind::kJsonSchema: return "json_schema";
    case GrammarKind::kRegex: return "regex";
    case GrammarKind::kEbnf: return "ebnf";
    case GrammarKind::kStructuralTag: return "structural_tag";
  }
  return "?";
}

int64_t grammar_vocab_size(const CompiledGrammar& grammar) { return grammar.g.GetTokenizerInfo().GetVocabSize(); }

int64_t bitmask_words(int64_t vocab_size) { return (vocab_size + 31) / 32; }

// ---------------------------------------------------------------------------------------------
// GrammarMatcher

struct GrammarMatcher::Impl {
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher m;
  int64_t vocab;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar) {
  RLM_CHECK(grammar != nullptr) << "GrammarMatcher without a grammar";
  const int64_t vocab = grammar->g.GetTokenizerInfo().GetVocabSize();
  xgrammar::GrammarMatcher m(grammar->g);
  impl_.reset(new Impl{std::move(grammar), std::move(m), vocab});
}

GrammarMatcher::~GrammarMatcher() = default;

int64_t GrammarMatcher::vocab_size() const { return impl_->vocab; }

void GrammarMatcher::fill_next_token_bitmask(int32_t* words) {
  const int64_t n = bitmask_words(impl_->vocab);
  if (impl_->m.IsTerminated()) {
    std::fill(words, words + n, -1);
    return;
  }
  int64_t shape[2] = {1, n};
  DLTensor t = bitmask_tensor(words, shape);
  impl_->m.FillNextTokenBitmask(&t, 0);
}

bool GrammarMatcher::accept(int32_t token) {
  if (token < 0 || token >= impl_->vocab || impl_->m.IsTerminated()) return false;
  return impl_->m.AcceptToken(token);
}

bool GrammarMatcher::terminated() const { return impl_->m.IsTerminated(); }

void GrammarMatcher::fill_batch(const std::vector<GrammarMatcher*>& matchers, int32_t* words) {
  if (matchers.empty()) return;
  const int64_t vocab = matchers[0]->vocab_size();
  const int64_t n = bitmask_words(vocab);
  if (matchers.size() == 1) {
    matchers[0]->fill_next_token_bitmask(words);
    return;
  }
  // Terminated matchers get an all-ones row here; the others go to xgrammar's thread pool.
  std::vector<xgrammar::GrammarMatcher> live;
  std::vector<int32_t> rows;
  for (size_t i = 0; i < matchers.size(); ++i) {
    RLM_CHECK_EQ(matchers[i]->vocab_size(), vocab) << " matchers of one batch over different vocabularies";
    if (matchers[i]->terminated()) {
      std::fill(words + i * n, words + (i + 1) * n, -1);
      continue;
    }
    live.push_back(matchers[i]->impl_->m);  // a handle: the copy shares the matcher's state
    rows.push_back(static_cast<int32_t>(i));
  }
  if (live.empty()) return;
  static xgrammar::BatchGrammarMatcher batch(
      static_cast<int32_t>(std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1, 8)));
  static std::mutex mu;  // one batch fill at a time through the shared pool
  std::lock_guard<std::mutex> lock(mu);
  int64_t shape[2] = {static_cast<int64_t>(matchers.size()), n};
  DLTensor t = bitmask_tensor(words, shape);
  batch.BatchFillNextTokenBitmask(&live, &t, rows);
}

// ---------------------------------------------------------------------------------------------
// The vocabulary

EncodedVocab encoded_vocab(const Tokenizer& tokenizer) {
  EncodedVocab v;
  const int32_t n = tokenizer.vocab_size();
  v.tokens.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id)) continue;
    if (std::optional<std::string> t = tokenizer.id_to_token(id)) v.tokens[static_cast<size_t>(id)] = std::move(*t);
  }
  // The encoding, told by the tokens a vocabulary needs for a newline: SentencePiece's byte
  // fallback <0x0A>, or the byte-level alphabet's "Ċ" (U+010A); otherwise tokens are raw text.
  if (tokenizer.token_to_id("<0x0A>").has_value()) {
    v.vocab_type = static_cast<int>(xgrammar::VocabType::BYTE_FALLBACK);
  } else if (tokenizer.token_to_id("\xC4\x8A").has_value()) {
    v.vocab_type = static_cast<int>(xgrammar::VocabType::BYTE_LEVEL);
  } else {
    v.vocab_type = static_cast<int>(xgrammar::VocabType::RAW);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// GrammarCompiler

struct GrammarCompiler::Impl {
  xgrammar::GrammarCompiler compiler;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> stop_ids)
    : vocab_size_(vocab_size), stop_ids_(std::move(stop_ids)) {
  EncodedVocab v = encoded_vocab(tokenizer);
  RLM_CHECK(static_cast<int64_t>(v.tokens.size()) <= vocab_size)
      << "the tokenizer has " << v.tokens.size() << " tokens, more than the model's vocab_size " << vocab_size;
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
  for (int32_t id : stop_ids_) RLM_CHECK(id >= 0 && id < vocab_size) << "stop token " << id << " outside the vocab";
  xgrammar::TokenizerInfo info(v.tokens, static_cast<xgrammar::VocabType>(v.vocab_type), static_cast<int>(vocab_size),
                               stop_ids_, /*add_prefix_space=*/false);
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 8));
  impl_.reset(new Impl{xgrammar::GrammarCompiler(info, threads, /*cache_enabled=*/true)});
}

GrammarCompiler::~GrammarCompiler() = default;

StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::compile(const GrammarSpec& spec) const {
  try {
    xgrammar::GrammarCompiler& c = impl_->compiler;
    switch (spec.kind) {
      case GrammarKind::kNone:
        return invalid_argument("no grammar to compile");
      case GrammarKind::kJsonObject:
        return std::make_shared<const CompiledGrammar>(
            c.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                /*strict_mode=*/false));
      case GrammarKind::kJsonSchema:
        return std::make_shared<const CompiledGrammar>(
            c.CompileJSONSchema(spec.source, /*any_whitespace=*/false, std::nullopt, std::nullopt, spec.strict));
      case GrammarKind::kRegex:
        return std::make_shared<const CompiledGrammar>(c.CompileRegex(spec.source));
      case GrammarKind::kEbnf:
        return std::make_shared<const CompiledGrammar>(c.CompileGrammar(spec.source, "root"));
      case GrammarKind::kStructuralTag:
        return std::make_shared<const CompiledGrammar>(c.CompileStructuralTag(spec.source));
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.size() > 2000) what = what.substr(0, 2000) + "...";
    return invalid_argument(str("invalid ", grammar_kind_name(spec.kind), ": ", what));
  }
  return invalid_argument("unknown grammar kind");
}

}  // namespace rlm::grammar
