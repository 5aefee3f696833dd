#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/utf8.h"
#include "tokenizer/hf_tokenizer.h"

namespace rlm {
namespace {

using nlohmann::json;

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}

json split(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

// Sets normalizer / pre_tokenizer / ignore_merges for a byte-level vocabulary's `pre` name.
Status apply_pre(const std::string& pre, json& tj) {
  tj["normalizer"] = nullptr;
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    tj["pre_tokenizer"] = byte_level(true);
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell") {
    tj["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3Regex), byte_level(false)}}};
    tj["model"]["ignore_merges"] = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    tj["normalizer"] = {{"type", "NFC"}};
    tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2Regex), byte_level(false)}}};
  } else {
    return unimplemented("GGUF tokenizer.ggml.pre '" + pre + "' is not supported");
  }
  tj["decoder"] = byte_level(true);
  return Status::ok();
}

// Merges of a SentencePiece-style vocabulary: every split of an ordinary piece into two pieces,
// ordered by the merged piece's score (higher first), then by ids.
json score_merges(const std::vector<std::string>& tokens, const std::vector<double>& scores,
                  const std::vector<int64_t>& types, const std::unordered_map<std::string, int32_t>& vocab) {
  struct M {
    double score;
    int32_t id, left, right;
  };
  std::vector<M> merges;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != kNormal && types[id] != kUserDefined) continue;
    const std::string& piece = tokens[id];
    for (size_t i = 1; i < piece.size(); ++i) {
      if ((static_cast<unsigned char>(piece[i]) & 0xC0) == 0x80) continue;  // split on characters
      auto l = vocab.find(piece.substr(0, i)), r = vocab.find(piece.substr(i));
      if (l != vocab.end() && r != vocab.end()) {
        merges.push_back({scores[id], static_cast<int32_t>(id), l->second, r->second});
      }
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const M& a, const M& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.id != b.id) return a.id < b.id;
    return a.left != b.left ? a.left < b.left : a.right < b.right;
  });
  json out = json::array();
  for (const M& m : merges) out.push_back({tokens[m.left], tokens[m.right]});
  return out;
}

}  // namespace

StatusOr<json> gguf_vocab_to_tokenizer_json(const GgufFile& file, json* config) {
  const std::string where = " in " + file.path();
  const auto model = file.get_string("tokenizer.ggml.model");
  if (!model) return not_found("no tokenizer.ggml.model" + where);
  const auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) return invalid_argument("missing or empty tokenizer.ggml.tokens" + where);
  const size_t n = tokens->size();
  std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type").value_or(std::vector<int64_t>(n, kNormal));
  if (types.size() != n) return invalid_argument("tokenizer.ggml.token_type has the wrong length" + where);

  std::unordered_map<std::string, int32_t> ids;
  json vocab = json::object();
  for (size_t i = 0; i < n; ++i) {
    if (!utf8::is_valid((*tokens)[i])) return invalid_argument("token " + std::to_string(i) + " is not UTF-8" + where);
    ids.emplace((*tokens)[i], static_cast<int32_t>(i));  // first id wins on duplicates
    if (!vocab.contains((*tokens)[i])) vocab[(*tokens)[i]] = i;
  }
  // Control (and, for byte-level vocabularies, unknown) tokens are special added tokens; user-
  // defined ones non-special added tokens. A SentencePiece-style unk stays a model token (like
  // SentencePieceTokenizer, its text is not matched as a special token).
  const bool spm_style = *model == "llama";
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    if (types[i] == kControl || (types[i] == kUnknown && !spm_style) || types[i] == kUserDefined) {
      if ((*tokens)[i].empty()) continue;
      added.push_back({{"id", i}, {"content", (*tokens)[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", types[i] != kUserDefined}});
    }
  }
  auto token_id = [&](const char* key) -> std::optional<int64_t> {
    auto id = file.get_int(key);
    if (!id || *id < 0 || *id >= static_cast<int64_t>(n)) return std::nullopt;
    return id;
  };

  json tj = {{"version", "1.0"}, {"added_tokens", added}, {"post_processor", nullptr}};
  *config = json::object();
  if (*model == "gpt2") {
    const auto merges = file.get_string_array("tokenizer.ggml.merges");
    if (!merges) return invalid_argument("tokenizer.ggml.model gpt2 needs tokenizer.ggml.merges" + where);
    json m = json::array();
    for (const std::string& s : *merges) {
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return invalid_argument("GGUF merge '" + s + "' has no space" + where);
      m.push_back({s.substr(0, sp), s.substr(sp + 1)});
    }
    tj["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"byte_fallback", false}, {"fuse_unk", false}};
    RLM_RETURN_IF_ERROR(apply_pre(file.get_string("tokenizer.ggml.pre").value_or("default"), tj));
    (*config)["add_bos_token"] = file.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  } else if (*model == "llama") {
    const auto scores = file.get_float_array("tokenizer.ggml.scores");
    if (!scores || scores->size() != n) return invalid_argument("tokenizer.ggml.model llama needs tokenizer.ggml.scores" + where);
    tj["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", score_merges(*tokens, *scores, types, ids)},
                   {"byte_fallback", true}, {"fuse_unk", true}};
    if (auto unk = token_id("tokenizer.ggml.unknown_token_id")) tj["model"]["unk_token"] = (*tokens)[*unk];
    const bool prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    json norm = json::array();
    if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    norm.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
    tj["pre_tokenizer"] = nullptr;
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
    (*config)["add_bos_token"] = file.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  } else {
    return unimplemented("GGUF tokenizer.ggml.model '" + *model + "' is not supported (gpt2, llama)" + where);
  }
  (*config)["add_eos_token"] = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (auto bos = token_id("tokenizer.ggml.bos_token_id")) (*config)["bos_token"] = (*tokens)[*bos];
  if (auto eos = token_id("tokenizer.ggml.eos_token_id")) (*config)["eos_token"] = (*tokens)[*eos];
  return tj;
}

StatusOr<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const GgufFile& file) {
  json config;
  RLM_ASSIGN_OR_RETURN(json tj, gguf_vocab_to_tokenizer_json(file, &config));
  auto t = HfTokenizer::from_json(tj, config);
  if (!t.is_ok()) return Status(t.status().code(), file.path() + ": " + t.status().message());
  return std::unique_ptr<Tokenizer>(std::move(t).value());
}

}  // namespace rlm
