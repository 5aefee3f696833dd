// HybridStateSlots: the recurrent-state slots of a hybrid (linear-attention) model as the scheduler
// hands them out. Every request with a request row owns a working slot (the state after kv_len
// tokens between steps); a step that reaches a chunk-aligned position may also snapshot the state
// there into the request's tracking slot, which the prefix cache then takes with the KV it covers
// (HybridRadixCache). Snapshot slots of the cache are evicted (LRU) when the pool runs dry.
// See docs/design/hybrid_radix_cache.md.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/forward_batch.h"
#include "cache/mamba_pool.h"
#include "cache/page_allocator.h"
#include "cache/prefix_cache.h"
#include "scheduler/request.h"

namespace rlm {

class HybridStateSlots {
 public:
  // cache and pages: the ledger's; a snapshot evicted for a slot may take KV pages with it, which
  // go back to `pages`.
  HybridStateSlots(MambaPool& pool, PrefixCache& cache, PageAllocator& pages, int64_t page_size);

  // Snapshot positions are multiples of this; 0 when the cache keeps no snapshots (naive).
  int64_t align() const { return align_; }
  int64_t num_free() const { return pool_.num_free(); }
  int64_t evictions() const { return evictions_; }  // snapshots evicted for a free slot

  // A free slot, evicting the least recently used cached snapshot when the pool is dry; -1 if none.
  int32_t alloc();
  // Frees the request's working and tracking slots.
  void free(Req& req);
  // Admission resumed `req` at the match's snapshot (req.kv_len == m.mamba_len()): copies that
  // state into the working slot (copy-on-write) and remembers the aligned branching point past it,
  // up to which the cache holds KV but no state.
  void resume(Req& req, const MatchResult& m);
  // Fills the entry's working slot and, when this step reaches a chunk-aligned position, asks the
  // model for a snapshot there (the branching point if reached, else the last aligned position).
  void plan(Req& req, BatchEntry& entry);
  // For caching req's prefix: the snapshot to offer and the length it covers (len > base), or
  // {base, -1} when the request has none past its locked prefix. Clears the pending snapshot.
  struct Snapshot {
    int64_t len = 0;
    int32_t slot = -1;
  };
  Snapshot take_snapshot(Req& req, int64_t base);
  // The cache took (or declined) the snapshot slot offered by take_snapshot.
  void snapshot_taken(Req& req) { req.mamba_track_slot = -1; }

  // Every slot is free, a cached snapshot, or one request's working / tracking slot.
  Status check_integrity(const std::vector<const Req*>& holders) const;

 private:
  MambaPool& pool_;
  PrefixCache& cache_;
  PageAllocator& pages_;
  int64_t page_size_;
  int64_t align_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace rlm
