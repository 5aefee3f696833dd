// KvLedger: who holds which KV page. It owns the PageAllocator and the PrefixCache, hands out
// request rows of req_to_token and (hybrid models) recurrent-state slots, and is the one place
// where page ownership changes: every page is free, held by the cache, or in exactly one request's
// own_pages. A request's positions [0, cache_handle.length) are the cache's (locked); positions
// from there on are in own_pages, page-aligned. See cache/prefix_cache.h for the contract.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cache/kv_pool.h"
#include "cache/page_allocator.h"
#include "cache/prefix_cache.h"
#include "scheduler/hybrid_state.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_config.h"

namespace rlm {

class KvLedger {
 public:
  // mamba: the hybrid model's state pool (nullptr for pure-attention models); mamba_chunk: the
  // snapshot granularity the hybrid cache keeps.
  KvLedger(ReqToTokenPool& table, int64_t num_pages, int64_t page_size, CacheKind kind, MambaPool* mamba,
           int64_t mamba_chunk);
  KvLedger(const KvLedger&) = delete;
  KvLedger& operator=(const KvLedger&) = delete;

  int64_t page_size() const { return page_size_; }
  ReqToTokenPool& table() { return table_; }
  PrefixCache& cache() { return *cache_; }
  const PrefixCache& cache() const { return *cache_; }
  HybridStateSlots* hybrid() { return hybrid_.get(); }  // nullptr for pure-attention models
  const HybridStateSlots* hybrid() const { return hybrid_.get(); }
  int64_t num_free_pages() const { return pages_.num_free(); }
  int64_t num_total_pages() const { return pages_.num_total(); }
  // Room for new work: free pages plus the pages the cache could evict.
  int64_t room_pages() const { return pages_.num_free() + cache_->evictable_size() / page_size_; }
  // The same in tokens.
  int64_t room_tokens() const { return pages_.num_free() * page_size_ + cache_->evictable_size(); }
  // Pages `req` must add to hold positions up to `to`.
  int64_t pages_needed(const Req& req, int64_t to) const;

  // Admission of a request without KV: a request row, the longest usable cached prefix of
  // `prompt` locked with its slots written to the row (kv_len = its length; a hybrid model resumes
  // at the deepest snapshot, in a working state slot of its own). false, with nothing held, when
  // no request row or state slot is free.
  bool admit(Req& req, std::span<const int32_t> prompt);
  // KV slots for positions [from, to) of req (from >= the request's cached prefix), allocating
  // pages (evicting unlocked cache entries) as needed; false, with nothing allocated, when short.
  bool extend(Req& req, int64_t from, int64_t to, std::vector<int32_t>& slots);
  // Offers req's computed tokens [0, kv_len) to the prefix cache (a hybrid model: up to its newest
  // snapshot). Duplicate pages are freed, pages the cache took leave own_pages. finished: the rest
  // is freed and the prefix unlocked; else the request re-locks the (longer) cached prefix.
  void cache_prefix(Req& req, bool finished);
  // Frees everything the request holds (own pages, prefix lock, request row, state slots).
  void drop(Req& req);
  // A finishing request: caches its KV (cache_kv) or drops it; the request row is returned.
  void release(Req& req, bool cache_kv);
  // Evicts every unlocked cache entry and snapshot.
  void flush();

  // Free pages + cached pages + pages of `holders` == all pages; the cache's own invariants; the
  // state slots add up.
  Status check_integrity(const std::vector<const Req*>& holders) const;

 private:
  bool alloc_pages(int64_t n, std::vector<int32_t>& out);  // evicts from the cache when needed

  ReqToTokenPool& table_;
  const int64_t page_size_;
  PageAllocator pages_;
  std::unique_ptr<PrefixCache> cache_;
  std::unique_ptr<HybridStateSlots> hybrid_;
};

}  // namespace rlm
