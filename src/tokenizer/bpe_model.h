// The BPE model of a tokenizer.json: vocabulary, ranked merges, unk / byte-fallback handling
// and ignore_merges. tokenize() reproduces Hugging Face's merge order exactly (a min-heap of
// (rank, position) with stale entries skipped).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace rlm {

class BpeModel {
 public:
  // From a tokenizer.json "model" object of type BPE.
  static StatusOr<BpeModel> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary string of `id`, or nullptr when the id is not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // id of "<0xAB>" per byte, -1 when absent
};

}  // namespace rlm
