// HybridRadixCache: the prefix cache for hybrid linear-attention models (Qwen3-Next: Gated
// DeltaNet + full attention; seed 002, SGLang's MambaRadixCache). A radix tree like RadixCache
// whose node value is the KV slots of its tokens plus an optional recurrent-state snapshot (a
// MambaPool slot holding the state after the node's last token). See prefix_cache.h for the KV
// ownership contract and docs/design/hybrid_radix_cache.md for the design.
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
// Eviction. evict(k): KV, unlocked leaves in LRU order (last_access); a leaf's snapshot goes
// with it. evict_mamba(k): snapshots in their own LRU order (mamba_access: stamped only when a
// snapshot is stored or returned by a match); an unlocked leaf goes whole (KV + snapshot), any
// other node just loses its snapshot and becomes a tombstone.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/prefix_cache.h"

namespace rlm {

class HybridRadixCache final : public PrefixCache {
 public:
  // chunk >= 1: snapshot granularity (64 for FLA); release frees a snapshot slot (required).
  HybridRadixCache(int32_t page_size, int32_t chunk, MambaSlotRelease release);

  int32_t page_size() const override { return page_size_; }
  MatchResult match_prefix(std::span<const int32_t> tokens) override;
  // KV only: new nodes are tombstones.
  InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) override {
    return insert_with_snapshot(tokens, slots, -1);
  }
  InsertResult insert_with_snapshot(std::span<const int32_t> tokens, std::span<const int32_t> slots,
                                    int32_t mamba_slot) override;
  void lock(const CacheHandle& handle) override;
  void unlock(const CacheHandle& handle) override;
  std::vector<int32_t> evict(int64_t num_tokens) override;
  std::vector<int32_t> evict_mamba(int64_t num_snapshots) override;
  std::vector<int32_t> reset() override;
  int64_t evictable_size() const override { return evictable_size_; }
  int64_t protected_size() const override { return protected_size_; }
  int32_t mamba_align() const override { return align_; }
  int64_t mamba_size() const override { return num_snapshots_; }
  Status check_integrity() const override;
  std::string to_string() const override;

  int32_t num_nodes() const { return num_live_nodes_; }  // including the root
  uint64_t clock() const { return clock_; }

 private:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;

  struct Node {
    std::vector<int32_t> key;    // [len] token ids; len % page_size == 0, len > 0 unless root
    std::vector<int32_t> value;  // [len] KV slot indices of those tokens
    int32_t parent = kNone;
    std::unordered_multimap<uint64_t, int32_t> children;  // first-page hash -> child id
    int32_t lock_ref = 0;
    uint64_t last_access = 0;   // KV LRU
    int32_t mamba = -1;         // snapshot slot (state after this node's last token); -1: tombstone
    uint64_t mamba_access = 0;  // snapshot LRU
    uint32_t generation = 0;
    bool live = false;
  };

  struct WalkResult {
    int32_t node = kRoot;
    int32_t length = 0;
  };

  uint64_t page_hash(std::span<const int32_t> page) const;
  int32_t find_child(int32_t node, std::span<const int32_t> first_page) const;
  WalkResult walk(std::span<const int32_t> tokens, uint64_t tick);
  // Splits node at offset; the new upper node (returned) holds key[0, offset) and no snapshot,
  // the original id keeps the tail and its snapshot, so handles to it stay valid.
  int32_t split(int32_t node, int32_t offset);
  int32_t new_node();
  void free_node(int32_t id);
  void remove_child(int32_t parent, int32_t child);
  // Removes an unlocked leaf: appends its KV slots to freed and releases its snapshot.
  void evict_leaf(int32_t id, std::vector<int32_t>& freed);
  void drop_snapshot(int32_t id);
  bool is_leaf(int32_t id) const { return at(id).children.empty(); }
  int32_t depth_of(int32_t id) const;
  void check_handle(const CacheHandle& handle, const char* op) const;
  CacheHandle handle_of(int32_t id, int32_t length) const;

  Node& at(int32_t id) { return nodes_[static_cast<size_t>(id)]; }
  const Node& at(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }

  int32_t page_size_;
  int32_t align_;  // lcm(chunk, page_size)
  MambaSlotRelease release_;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_ids_;
  int32_t num_live_nodes_ = 1;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
  int64_t num_snapshots_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace rlm
