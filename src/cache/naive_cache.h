// NaiveCache: the PrefixCache that shares nothing (`--cache naive`). match_prefix always
// returns the empty prefix and insert takes ownership of no slot (prefix_len 0, handle.length 0),
// so under the contract in prefix_cache.h a request frees all of its own slots when it finishes.
// Useful as a baseline and for models or debugging where prefix reuse must be off.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"

namespace rlm {

class NaiveCache final : public PrefixCache {
 public:
  explicit NaiveCache(int32_t page_size);

  int32_t page_size() const override { return page_size_; }
  MatchResult match_prefix(std::span<const int32_t> tokens) override;
  InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) override;
  // Only the empty handle exists; anything else is a caller bug (RLM_CHECK).
  void lock(const CacheHandle& handle) override;
  void unlock(const CacheHandle& handle) override;
  std::vector<int32_t> evict(int64_t num_tokens) override;  // nothing is cached: always empty
  std::vector<int32_t> reset() override;
  int64_t evictable_size() const override { return 0; }
  int64_t protected_size() const override { return 0; }
  Status check_integrity() const override;
  std::string to_string() const override;

 private:
  void check_handle(const CacheHandle& handle, const char* op) const;

  int32_t page_size_;
};

}  // namespace rlm
