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
constexpr const char* kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's letter and punctuation runs (code points as \x{..}), and the CJK runs of both
// DeepSeek tokenizers.
constexpr const char* kDeepseekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295})"
    R"(-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E})"
    R"(-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0})"
    R"(-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})"
    R"(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50})"
    R"(-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE})"
    R"(\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2})"
    R"(-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149})"
    R"(\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3})"
    R"(\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70})"
    R"(-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF})"
    R"(\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekLlmPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}

json split(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}

json sequence(json parts) { return {{"type", "Sequence"}, {"pretokenizers", std::move(parts)}}; }

// Sets normalizer / pre_tokenizer / ignore_merges for a byte-level vocabulary's `pre` name: the
// split rules of the Hugging Face tokenizer.json each name stands for.
Status apply_pre(const std::string& pre, json& tj) {
  const json digits = {{"type", "Digits"}, {"individual_digits", true}};
  const json nfc = {{"type", "NFC"}};
  tj["normalizer"] = nullptr;
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    tj["pre_tokenizer"] = byte_level(true);
  } else if (pre == "mpt") {  // GPT-NeoX's tokenizer
    tj["normalizer"] = nfc;
    tj["pre_tokenizer"] = byte_level(true);
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell") {
    tj["pre_tokenizer"] = sequence({digits, byte_level(true)});
  } else if (pre == "command-r") {
    tj["normalizer"] = nfc;
    tj["pre_tokenizer"] = sequence({digits, byte_level(true)});
  } else if (pre == "falcon") {
    tj["pre_tokenizer"] = sequence({{{"type", "Punctuation"}, {"behavior", "Contiguous"}},
                                    byte_level(true),
                                    {{"type", "Digits"}, {"individual_digits", false}},
                                    split("[0-9][0-9][0-9]")});
  } else if (pre == "deepseek-llm") {
    tj["pre_tokenizer"] = sequence({split(R"([\r\n])"), split(kDeepseekLlmLetters), split(kDeepseekLlmPunct),
                                    split(R"(\s+$)"), split(kCjk), digits, byte_level(false)});
  } else if (pre == "deepseek-coder") {
    tj["pre_tokenizer"] = sequence({split(R"([\r\n])"), split(R"(\s?\p{L}+)"), split(R"(\s?\p{P}+)"),
                                    split(kCjk), digits, byte_level(false)});
  } else if (pre == "llama-bpe" || pre == "llama3") {
    tj["pre_tokenizer"] = sequence({split(kLlama3Regex), byte_level(false)});
    tj["model"]["ignore_merges"] = true;
  } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    tj["normalizer"] = nfc;
    tj["pre_tokenizer"] = sequence({split(kQwen2Regex), byte_level(false)});
  } else if (pre == "qwen35") {
    tj["pre_tokenizer"] = sequence({split(kQwen35Regex), byte_level(false)});
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

// tokenizer.ggml.merges: "left right", split at the first space after the first character.
StatusOr<json> read_merges(const GgufFile& file, const std::string& where) {
  const auto merges = file.get_string_array("tokenizer.ggml.merges");
  if (!merges)
    return invalid_argument("tokenizer.ggml.model " + file.get_string("tokenizer.ggml.model").value_or("") +
                            " needs tokenizer.ggml.merges" + where);
  json m = json::array();
  for (const std::string& s : *merges) {
    const size_t sp = s.find(' ', 1);
    if (sp == std::string::npos) return invalid_argument("GGUF merge '" + s + "' has no space" + where);
    m.push_back({s.substr(0, sp), s.substr(sp + 1)});
  }
  return m;
}

// A BERT WordPiece vocabulary. llama.cpp's converter writes a word-initial piece with a leading
// U+2581 and a continuation piece without its "##" (pieces in [brackets] and control tokens as
// they are); this restores the Hugging Face spelling and the BERT normalizer, pre-tokenizer,
// decoder and [CLS] ... [SEP] post-processor.
Status make_wordpiece(const std::vector<std::string>& tokens, const std::vector<int64_t>& types,
                      std::optional<int64_t> unk, std::optional<int64_t> cls, std::optional<int64_t> sep,
                      const std::string& where, json& tj) {
  if (!unk || !cls || !sep) {
    return invalid_argument("tokenizer.ggml.model bert needs unknown, cls and seperator token ids" + where);
  }
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    std::string piece;
    if (types[i] == kControl || (t.size() >= 2 && t.front() == '[' && t.back() == ']'))
      piece = t;
    else if (t.rfind(kSpace, 0) == 0)
      piece = t.substr(std::string_view(kSpace).size());
    else
      piece = "##" + t;
    if (!vocab.contains(piece)) vocab[piece] = i;
  }
  tj["model"] = {{"type", "WordPiece"},
                 {"vocab", std::move(vocab)},
                 {"unk_token", tokens[*unk]},
                 {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100}};
  tj["normalizer"] = {{"type", "BertNormalizer"},
                      {"clean_text", true},
                      {"handle_chinese_chars", true},
                      {"strip_accents", nullptr},
                      {"lowercase", true}};
  tj["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  tj["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  tj["post_processor"] = {
      {"type", "BertProcessing"}, {"cls", {tokens[*cls], *cls}}, {"sep", {tokens[*sep], *sep}}};
  return Status::ok();
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
  // SentencePieceTokenizer, its text is not matched as a special token). Phi-3's tokenizer.json
  // strips the white space after its added tokens except <unk>, <s> and <|endoftext|>; the GGUF
  // does not record that, so it is keyed on the architecture (as llama.cpp does).
  const bool spm_style = *model == "llama";
  const bool phi3 = file.get_string("general.architecture").value_or("") == "phi3";
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = (*tokens)[i];
    if (types[i] == kControl || (types[i] == kUnknown && !spm_style) || types[i] == kUserDefined) {
      if (t.empty()) continue;
      const bool rstrip = phi3 && t != "<unk>" && t != "<s>" && t != "<|endoftext|>";
      added.push_back({{"id", i},
                       {"content", t},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", rstrip},
                       {"normalized", false},
                       {"special", types[i] != kUserDefined}});
    }
  }
  // A special token's id, as the vocabulary keeps it: a token listed twice is known by its first
  // id (above), so an id pointing at a later copy becomes the first one -- otherwise the BERT
  // post-processor emitted an id past vocab_size() (found by fuzzing, 2026-11-27).
  auto token_id = [&](const char* key) -> std::optional<int64_t> {
    auto id = file.get_int(key);
    if (!id || *id < 0 || *id >= static_cast<int64_t>(n)) return std::nullopt;
    return ids.at((*tokens)[static_cast<size_t>(*id)]);
  };

  json tj = {{"version", "1.0"}, {"added_tokens", added}, {"post_processor", nullptr}};
  *config = json::object();
  if (*model == "gpt2") {
    RLM_ASSIGN_OR_RETURN(json m, read_merges(file, where));
    tj["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"byte_fallback", false}, {"fuse_unk", false}};
    RLM_RETURN_IF_ERROR(apply_pre(file.get_string("tokenizer.ggml.pre").value_or("default"), tj));
    (*config)["add_bos_token"] = file.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  } else if (*model == "llama" || *model == "gemma4") {
    // SentencePiece-style BPE with byte fallback: merges from the scores (llama) or stored
    // (gemma4, whose tokenizer.json replaces spaces by U+2581 and adds no prefix).
    json merges;
    if (*model == "llama") {
      const auto scores = file.get_float_array("tokenizer.ggml.scores");
      if (!scores || scores->size() != n)
        return invalid_argument("tokenizer.ggml.model llama needs tokenizer.ggml.scores" + where);
      merges = score_merges(*tokens, *scores, types, ids);
    } else {
      RLM_ASSIGN_OR_RETURN(merges, read_merges(file, where));
    }
    tj["model"] = {
        {"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"byte_fallback", true}, {"fuse_unk", true}};
    if (auto unk = token_id("tokenizer.ggml.unknown_token_id")) tj["model"]["unk_token"] = (*tokens)[*unk];
    const json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
    json dec = json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                            {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (*model == "gemma4") {
      tj["normalizer"] = replace_space;
    } else {
      const bool prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
      json norm = json::array();
      if (prefix) norm.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
      norm.push_back(replace_space);
      tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", norm}};
      if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    tj["pre_tokenizer"] = nullptr;
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
    (*config)["add_bos_token"] = file.get_bool("tokenizer.ggml.add_bos_token").value_or(true);
  } else if (*model == "bert") {
    RLM_RETURN_IF_ERROR(make_wordpiece(*tokens, types, token_id("tokenizer.ggml.unknown_token_id"),
                                       token_id("tokenizer.ggml.cls_token_id"),
                                       token_id("tokenizer.ggml.seperator_token_id"), where, tj));
  } else {
    return unimplemented("GGUF tokenizer.ggml.model '" + *model +
                         "' is not supported (gpt2, llama, gemma4, bert)" + where);
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
