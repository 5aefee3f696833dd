// Shared helpers for the tokenizer tests: fixture paths and the parity corpus / reference files
// written by tools/make_tokenizer_corpus.py and tools/make_tokenizer_golden.py.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace rlm::test {

inline std::string tokenizer_data(const std::string& rel) {
  return std::string(RADIXLM_SOURCE_DIR) + "/tests/data/tokenizer/" + rel;
}

struct Fixture {
  const char* name;       // test name
  const char* tokenizer;  // path under tests/data/tokenizer/ ("@root/..." = under the repo root);
                          // empty for variants.json entries
  bool generated;         // not committed: made by tools/make_tokenizer_fixtures.py / setup.sh
  const char* ref = nullptr;  // reference tests/data/tokenizer/<ref>.ref.jsonl; null = name
  std::string ref_name() const { return ref ? ref : name; }
};

inline std::string fixture_path(const Fixture& f) {
  const std::string t = f.tokenizer;
  if (t.rfind("@root/", 0) == 0) return std::string(RADIXLM_SOURCE_DIR) + "/" + t.substr(6);
  return tokenizer_data(t);
}

inline const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> f = {
      {"smollm2", "smollm2/tokenizer.json", false},
      {"llama3", "generated/llama3/tokenizer.json", true},
      {"qwen3", "generated/qwen3/tokenizer.json", true},
      {"mistral_v1_hf", "mistral_v1_hf/tokenizer.json", false},
      {"mistral_v1", "mistral_v1/tokenizer.model", false},
      {"smollm2_digits", "", false},
      {"smollm2_prefix_space", "", false},
      {"mistral_v1_metaspace", "", false},
      // GGUF vocabularies, checked against the Hugging Face reference of the same vocabulary:
      // SmolLM2's GGUF says tokenizer.ggml.pre = smollm (digits split individually), which is
      // the smollm2_digits variant; mistral_v1/vocab.gguf is tokenizer.model as a llama vocab
      // (checked against SentencePiece); llama3/qwen3 vocab.gguf hold the tokenizer.json vocabs.
      {"smollm2_gguf", "@root/models/SmolLM2-135M-Instruct.Q4_1.gguf", true, "smollm2_digits"},
      {"mistral_v1_gguf", "mistral_v1/vocab.gguf", false, "mistral_v1"},
      {"llama3_gguf", "generated/llama3/vocab.gguf", true, "llama3"},
      {"qwen3_gguf", "generated/qwen3/vocab.gguf", true, "qwen3"},
  // llama.cpp's test vocabularies (tools/make_gguf_vocab_fixtures.py): each GGUF, and the
  // Hugging Face tokenizer.json rebuilt from it (checked against llama.cpp's .out ids), against
  // the goldens of that tokenizer.json.
#define RLM_GGUF_VOCAB(id, family)                                                            \
  {"gguf_" id, "generated/gguf_vocab/" family ".gguf", true, "generated/gguf_vocab/" family}, \
      {"hf_" id, "generated/gguf_vocab/" family ".tokenizer.json", true, "generated/gguf_vocab/" family}
      RLM_GGUF_VOCAB("gpt_2", "gpt-2"),
      RLM_GGUF_VOCAB("mpt", "mpt"),
      RLM_GGUF_VOCAB("starcoder", "starcoder"),
      RLM_GGUF_VOCAB("refact", "refact"),
      RLM_GGUF_VOCAB("command_r", "command-r"),
      RLM_GGUF_VOCAB("falcon", "falcon"),
      RLM_GGUF_VOCAB("deepseek_llm", "deepseek-llm"),
      RLM_GGUF_VOCAB("deepseek_coder", "deepseek-coder"),
      RLM_GGUF_VOCAB("llama_bpe", "llama-bpe"),
      RLM_GGUF_VOCAB("qwen2", "qwen2"),
      RLM_GGUF_VOCAB("qwen35", "qwen35"),
      RLM_GGUF_VOCAB("llama_spm", "llama-spm"),
      RLM_GGUF_VOCAB("phi_3", "phi-3"),
      RLM_GGUF_VOCAB("gemma_4", "gemma-4"),
      RLM_GGUF_VOCAB("bert_bge", "bert-bge"),
#undef RLM_GGUF_VOCAB
      // bert-bge's tokenizer.json with other BertNormalizer / WordPiece options.
      {"hf_bert_cased", "generated/gguf_vocab/bert-cased.tokenizer.json", true, "generated/gguf_vocab/bert-cased"},
      {"hf_bert_accents", "generated/gguf_vocab/bert-accents.tokenizer.json", true,
       "generated/gguf_vocab/bert-accents"},
  };
  return f;
}

inline nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// The fixture's tokenizer: a file through load_tokenizer, or a variants.json entry (a committed
// tokenizer.json with some top-level fields replaced) through HfTokenizer::from_json.
inline StatusOr<std::unique_ptr<Tokenizer>> load_fixture(const Fixture& f) {
  if (std::string(f.tokenizer).empty()) {
    const auto variants = read_json_file(tokenizer_data("variants.json"));
    const auto& v = variants.at(f.name);
    auto tj = read_json_file(tokenizer_data(v.at("base").get<std::string>()));
    for (auto it = v.at("set").begin(); it != v.at("set").end(); ++it) tj[it.key()] = it.value();
    RLM_ASSIGN_OR_RETURN(auto t, HfTokenizer::from_json(tj, nlohmann::json()));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  return load_tokenizer(fixture_path(f));
}

inline bool fixture_available(const Fixture& f) {
  return !f.generated || std::filesystem::exists(fixture_path(f));
}

inline std::string hex_to_bytes(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// The raw bytes of every corpus line (invalid UTF-8 lines included).
inline std::vector<std::string> corpus_lines() {
  std::ifstream in(tokenizer_data("corpus.jsonl"));
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    out.push_back(j.contains("text") ? j["text"].get<std::string>() : hex_to_bytes(j["hex"]));
  }
  return out;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace rlm::test
