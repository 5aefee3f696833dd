// PrefixCache: the interface a scheduler uses to share KV slots between requests with a common
// token prefix. Two implementations: RadixCache (sharing, LRU eviction) and NaiveCache (no
// sharing, `--cache naive`). A cache stores KV *slot indices* (int32, one per token); it never
// owns the KV tensors and never allocates slots: slots come from the PageAllocator and go back
// to it through the caller.
//
// Page alignment. With page_size > 1 only whole pages are cached: insert() stores the first
// floor(n / page_size) * page_size tokens and a match length is always a multiple of page_size.
// A request's slots must then be page-structured (slot = page * page_size + offset, one page per
// page_size tokens), so that the cache's pages and the request's pages never share a page.
//
// OWNERSHIP CONTRACT (how a scheduler drives either implementation)
//   Admission. m = match_prefix(tokens); lock(m.handle). (A scheduler matches tokens[0, n-1) so
//   that at least one token is computed and yields logits.) Slots [0, c) with c = m.handle.length
//   are the cache's (m.slots); they stay valid while the handle is locked. The scheduler
//   allocates its own slots for [c, n).
//   Caching a request (after a prefill chunk, or when it finishes) with its n tokens and slots:
//     r = insert(tokens[0, n), slots[0, n))
//     [0, c)                         cache-owned already; unchanged.
//     [c, r.prefix_len)              duplicates: another request cached the same tokens meanwhile;
//                                    the cache kept its own slots, so the REQUEST FREES these.
//                                    (r.prefix_len >= c holds because the old handle is locked.)
//     [r.prefix_len, r.handle.length) ownership moves to the cache; the request must not free them.
//     [r.handle.length, n)           still the request's (the partial last page; all of [0, n)
//                                    for NaiveCache, whose handle.length is 0). Freed by the
//                                    request when it finishes.
//   Then unlock(old handle). A request that goes on (chunked prefill) instead takes
//   m2 = match_prefix(tokens[0, r.handle.length)), locks m2.handle, unlocks the old one and
//   rewrites its slot table [0, m2.handle.length) with m2.slots (the duplicates were freed).
//   Eviction. When the allocator runs dry: freed = evict(k); return freed's pages to the
//   allocator. Only unlocked entries are evicted, so in-flight prefixes are never freed.
//   Accounting. Free pages + total_size() / page_size + pages held by requests == all pages;
//   the room available for new work is free pages * page_size + evictable_size().
//
// Hybrid (linear-attention) models. A request can only resume where the cache also holds a
// snapshot of the recurrent state (a MambaPool slot), so a hybrid cache (HybridRadixCache, see
// hybrid_radix_cache.h and docs/design/hybrid_radix_cache.md) reports, besides the KV match, the
// deepest matched prefix with a snapshot (MatchResult::mamba_handle / mamba_slot), and
// insert_with_snapshot() can hand it a snapshot slot. Caches without snapshots (radix, naive)
// report mamba_len() == 0 and never take a snapshot slot, so a scheduler drives all three alike.
//
// Threading: not thread-safe; the scheduler thread owns the cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rlm {

class CacheEventObserver;

// Names a cached prefix: the tree node where it ends and its length in tokens. Valid until the
// node is evicted or the cache is reset; a locked handle stays valid (node splits keep it).
// The default handle (length 0) is the empty prefix and is always valid.
struct CacheHandle {
  int32_t node = 0;         // implementation-defined node id; 0 is the root (empty prefix)
  uint32_t generation = 0;  // detects use of a handle whose node was evicted and reused
  int32_t length = 0;       // tokens from the root to the end of this node
  bool operator==(const CacheHandle&) const = default;
};

struct MatchResult {
  CacheHandle handle;          // the last matched node; handle.length == slots.size()
  std::vector<int32_t> slots;  // [handle.length] KV slots of the matched prefix
  // Hybrid caches: the deepest prefix of the match whose node holds a recurrent-state snapshot
  // (the root, length 0, when none; always the root for caches without snapshots). A hybrid
  // model resumes there: slots[0, mamba_len()) and the state in mamba_slot.
  CacheHandle mamba_handle;
  int32_t mamba_slot = -1;     // MambaPool slot with the state after mamba_len() tokens; -1 at 0
  int32_t length() const { return handle.length; }
  int32_t mamba_len() const { return mamba_handle.length; }
};

struct InsertResult {
  int32_t prefix_len = 0;  // tokens that were already cached before this insert (page multiple)
  CacheHandle handle;      // the cached prefix this insert ends at; length = page-aligned n
                           // (0 for NaiveCache, which caches nothing)
  bool mamba_taken = false;  // insert_with_snapshot: the cache now owns the snapshot slot
};

// Gives a MambaPool slot that a hybrid cache owned back to its pool (eviction, reset).
using MambaSlotRelease = std::function<void(int32_t slot)>;

class PrefixCache {
 public:
  virtual ~PrefixCache() = default;

  virtual int32_t page_size() const = 0;

  // The longest cached page-aligned prefix of `tokens` and its slots. Marks the matched path as
  // used now (LRU). May split a tree node; never changes what is cached or the sizes.
  virtual MatchResult match_prefix(std::span<const int32_t> tokens) = 0;

  // Caches the page-aligned part of tokens with their slots (slots.size() == tokens.size()).
  // See the ownership contract above for what prefix_len means to the caller.
  virtual InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) = 0;

  // lock protects the prefix named by handle (and every prefix of it) from eviction; unlock
  // undoes one lock. A stale handle, or more unlocks than locks, is an RLM_CHECK error.
  virtual void lock(const CacheHandle& handle) = 0;
  virtual void unlock(const CacheHandle& handle) = 0;

  // Frees least-recently-used unlocked entries until at least num_tokens tokens are freed or
  // nothing evictable is left (may free more than asked: whole entries). Returns the freed slots
  // (a multiple of page_size); the caller gives their pages back to the allocator.
  virtual std::vector<int32_t> evict(int64_t num_tokens) = 0;

  // Drops everything; requires protected_size() == 0. Returns all slots that were cached.
  virtual std::vector<int32_t> reset() = 0;

  virtual int64_t evictable_size() const = 0;  // cached tokens that evict() could free
  virtual int64_t protected_size() const = 0;  // cached tokens under a lock
  int64_t total_size() const { return evictable_size() + protected_size(); }

  // --- recurrent-state snapshots (hybrid caches; the defaults store none) ---
  // Snapshot positions are multiples of this (0: the cache stores no snapshots).
  virtual int32_t mamba_align() const { return 0; }
  // insert() that also offers mamba_slot (-1: none), the state after all of tokens; with a snapshot
  // tokens.size() must be a positive multiple of mamba_align(). The cache takes the slot
  // (mamba_taken) unless that prefix already has a snapshot; a slot not taken stays the caller's.
  virtual InsertResult insert_with_snapshot(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                                            int32_t mamba_slot) {
    (void)mamba_slot;
    return insert(tokens, slots);
  }
  // Frees up to num_snapshots least-recently-used snapshots (their slots go to the release
  // callback). Returns the KV slots that were freed with them (an unlocked leaf goes whole).
  virtual std::vector<int32_t> evict_mamba(int64_t num_snapshots) {
    (void)num_snapshots;
    return {};
  }
  virtual int64_t mamba_size() const { return 0; }  // snapshots held

  // Reports every change of what is cached to `observer` (cache_events.h); null stops it. Caches
  // that cache nothing (naive) report nothing. Not owned.
  virtual void set_observer(CacheEventObserver* observer) { (void)observer; }

  // Checks every structural invariant; a failure names the first broken one.
  virtual Status check_integrity() const = 0;
  virtual std::string to_string() const = 0;
};

// kind: "radix" or "naive". page_size >= 1. For a hybrid model pass mamba_chunk > 0 (snapshot
// granularity, 64 for FLA kernels) and the callback that frees a snapshot slot: "radix" is then a
// HybridRadixCache; "naive" stays NaiveCache (no sharing, no snapshots).
StatusOr<std::unique_ptr<PrefixCache>> make_prefix_cache(std::string_view kind, int32_t page_size,
                                                         int32_t mamba_chunk = 0,
                                                         MambaSlotRelease release_mamba = nullptr);

}  // namespace rlm
