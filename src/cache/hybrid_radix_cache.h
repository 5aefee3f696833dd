// HybridRadixCache: the prefix cache for hybrid linear-attention models (Qwen3-Next: Gated
// DeltaNet + full attention; SGLang's MambaRadixCache). The RadixTree of radix_tree.h with
// RadixCache's KV payload (radix_cache.h: KV match, insert, eviction and slot checks are shared)
// plus an optional recurrent-state snapshot per node: a MambaPool slot holding the state after the
// node's last token. See prefix_cache.h for the KV ownership contract and
// docs/design/hybrid_radix_cache.md for the design.
//
// Snapshots. Only at depths that are multiples of mamba_align() = lcm(chunk, page_size) (the
// FLA kernels can hand out states at chunk boundaries only). A node without a snapshot is a
// tombstone w.r.t. the recurrent state: its KV is cached, but nobody can resume there.
// match_prefix returns the KV match and, in mamba_handle / mamba_slot, the deepest node on the
// matched path that has a snapshot: a hybrid model resumes there and recomputes the rest.
//
// Snapshot slot ownership. A slot passed to insert_with_snapshot() belongs to the cache once
// mamba_taken is reported; the cache never allocates slots and gives its slots back only through
// the MambaSlotRelease callback given at construction (on evict, evict_mamba, reset). A caller
// copies a matched snapshot into its own working slot (copy-on-write): cached snapshots are never
// written after insertion.
//
// Locks protect KV (the whole path, as in RadixCache), not snapshots: a scheduler copies the
// snapshot right after match_prefix, so snapshots are always evictable.
//
// Eviction. evict(k): the tree's KV LRU (unlocked leaves by last_access); a leaf's snapshot goes
// with it. evict_mamba(k): snapshots in their own LRU order (mamba_access: stamped only when a
// snapshot is stored or returned by a match); an unlocked leaf goes whole (KV + snapshot), any
// other node just loses its snapshot and becomes a tombstone.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "cache/radix_cache.h"
#include "cache/radix_tree.h"

namespace rlm {

class HybridRadixCache final : public PrefixCache {
 public:
  // chunk >= 1: snapshot granularity (64 for FLA); release frees a snapshot slot (required).
  HybridRadixCache(int32_t page_size, int32_t chunk, MambaSlotRelease release);

  int32_t page_size() const override { return tree_.page_size(); }
  MatchResult match_prefix(std::span<const int32_t> tokens) override;
  // KV only: new nodes are tombstones.
  InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) override {
    return insert_with_snapshot(tokens, slots, -1);
  }
  InsertResult insert_with_snapshot(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                                    int32_t mamba_slot) override;
  void lock(const CacheHandle& handle) override { tree_.lock(handle); }
  void unlock(const CacheHandle& handle) override { tree_.unlock(handle); }
  std::vector<int32_t> evict(int64_t num_tokens) override;
  std::vector<int32_t> evict_mamba(int64_t num_snapshots) override;
  std::vector<int32_t> reset() override;
  void set_observer(CacheEventObserver* observer) override { tree_.set_observer(observer); }
  int64_t evictable_size() const override { return tree_.evictable_size(); }
  int64_t protected_size() const override { return tree_.protected_size(); }
  int32_t mamba_align() const override { return align_; }
  int64_t mamba_size() const override { return num_snapshots_; }
  Status check_integrity() const override;
  std::string to_string() const override;

  int32_t num_nodes() const { return tree_.num_nodes(); }  // including the root
  uint64_t clock() const { return tree_.clock(); }

 private:
  // A node's payload: its KV slots and its snapshot.
  struct Payload : KvSlots {
    int32_t mamba = -1;         // snapshot slot (state after this node's last token); -1: tombstone
    uint64_t mamba_access = 0;  // snapshot LRU
    // The new upper node of a split gets the head's KV and no snapshot; the original id keeps
    // the tail and its snapshot, so handles to it stay valid.
    void split_into(Payload& upper, int32_t offset) { KvSlots::split_into(upper, offset); }
  };

  // Drops the node's snapshot (if any) through the release callback.
  void drop_snapshot(int32_t id);
  // What leaves with a node (evicted or reset): its snapshot is released, its slots go to freed.
  void release_node(int32_t id, std::vector<int32_t>& freed);

  RadixTree<Payload> tree_;
  int32_t align_;  // lcm(chunk, page_size)
  MambaSlotRelease release_;
  int64_t num_snapshots_ = 0;
};

}  // namespace rlm
