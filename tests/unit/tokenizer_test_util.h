// Shared helpers for the tokenizer tests: fixture paths and the parity corpus / reference files
// written by tools/make_tokenizer_corpus.py and tools/make_tokenizer_golden.py.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rlm::test {

inline std::string tokenizer_data(const std::string& rel) {
  return std::string(RADIXLM_SOURCE_DIR) + "/tests/data/tokenizer/" + rel;
}

struct Fixture {
  const char* name;       // reference file: tests/data/tokenizer/<name>.ref.jsonl
  const char* tokenizer;  // path under tests/data/tokenizer/
  bool generated;         // made by tools/make_tokenizer_fixtures.py, not committed
};

inline const std::vector<Fixture>& fixtures() {
  static const std::vector<Fixture> f = {
      {"smollm2", "smollm2/tokenizer.json", false},
      {"llama3", "generated/llama3/tokenizer.json", true},
      {"qwen3", "generated/qwen3/tokenizer.json", true},
      {"mistral_v1_hf", "mistral_v1_hf/tokenizer.json", false},
      {"mistral_v1", "mistral_v1/tokenizer.model", false},
  };
  return f;
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
