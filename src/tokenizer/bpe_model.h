// The BPE model of a tokenizer.json: vocabulary, ranked merges, unk / byte-fallback handling
// and ignore_merges. tokenize() reproduces Hugging Face's merge order exactly (a min-heap of
// (rank, position) with stale entries skipped).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/token_model.h"

namespace rlm {

class BpeModel : public TokenModel {
 public:
  // From a tokenizer.json "model" object of type BPE.
  static StatusOr<BpeModel> from_json(const nlohmann::json& model);

  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::vector<int32_t>& symbols) const;
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;
  // Id of the one-character token `ch` (a UTF-8 sequence), or -1.
  int32_t char_id(std::string_view ch) const;

  // Results for recent words (like Hugging Face's BPE cache): sharded, each shard cleared when
  // full. Only a speed-up: tokenize() gives the same ids with or without it.
  struct WordCache {
    static constexpr size_t kShards = 16, kShardCapacity = 4096, kMaxWordBytes = 64;
    struct Shard {
      std::mutex mutex;
      std::unordered_map<std::string, std::vector<int32_t>> words;
    };
    std::array<Shard, kShards> shards;
  };

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // id of "<0xAB>" per byte, -1 when absent
  std::vector<int32_t> bmp_char_ids_;  // [0x10000] id of each one-character BMP token, or -1
  std::unique_ptr<WordCache> cache_ = std::make_unique<WordCache>();
};

}  // namespace rlm
