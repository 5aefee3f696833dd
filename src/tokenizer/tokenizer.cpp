#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "formats/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace rlm {

StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_path) {
  namespace fs = std::filesystem;
  const fs::path p(model_path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "tokenizer.json")) return load_tokenizer((p / "tokenizer.json").string());
    if (fs::exists(p / "tokenizer.model")) return load_tokenizer((p / "tokenizer.model").string());
    return not_found("no tokenizer.json or tokenizer.model in " + model_path);
  }
  if (!fs::exists(p, ec)) return not_found("tokenizer file not found: " + model_path);
  const std::string ext = p.extension().string();
  if (ext == ".json") {
    RLM_ASSIGN_OR_RETURN(auto t, HfTokenizer::load(model_path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (ext == ".model") {
    RLM_ASSIGN_OR_RETURN(auto t, SentencePieceTokenizer::load(model_path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (ext == ".gguf") {
    RLM_ASSIGN_OR_RETURN(auto file, GgufFile::open(model_path));
    return load_gguf_tokenizer(*file);
  }
  return unimplemented("cannot tell the tokenizer format of " + model_path +
                       " (expected tokenizer.json, tokenizer.model, a .gguf file or a directory)");
}

}  // namespace rlm
