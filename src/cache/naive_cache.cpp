#include "cache/naive_cache.h"

#include "core/check.h"

namespace rlm {

NaiveCache::NaiveCache(int32_t page_size) : page_size_(page_size) {
  RLM_CHECK_GE(page_size, 1) << "NaiveCache page_size";
}

MatchResult NaiveCache::match_prefix(std::span<const int32_t> tokens) { return MatchResult{}; }

InsertResult NaiveCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) {
  RLM_CHECK_EQ(tokens.size(), slots.size()) << "NaiveCache::insert needs one slot per token";
  return InsertResult{};
}

void NaiveCache::check_handle(const CacheHandle& handle, const char* op) const {
  RLM_CHECK(handle.node == 0 && handle.generation == 0 && handle.length == 0)
      << "NaiveCache::" << op << ": only the empty handle exists (got node " << handle.node << ", length "
      << handle.length << "); was it issued by another cache?";
}

void NaiveCache::lock(const CacheHandle& handle) { check_handle(handle, "lock"); }

void NaiveCache::unlock(const CacheHandle& handle) { check_handle(handle, "unlock"); }

std::vector<int32_t> NaiveCache::evict(int64_t num_tokens) { return {}; }

std::vector<int32_t> NaiveCache::reset() { return {}; }

Status NaiveCache::check_integrity() const { return Status::ok(); }

std::string NaiveCache::to_string() const { return str("NaiveCache(page_size=", page_size_, ")"); }

}  // namespace rlm
