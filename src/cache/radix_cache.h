// RadixCache: a radix tree over token ids whose nodes hold the KV slot indices of their tokens
// (seed 003 §6.3–6.4, SGLang's RadixAttention). See prefix_cache.h for the ownership contract
// and docs/design/radix_cache.md for the design.
//
// Tree. Node = a run of tokens (key) and their slots (value), a parent, children keyed by the
// child's first page of tokens, a lock count and a last-access tick. Every non-root node holds a
// non-empty multiple of page_size tokens. The root holds nothing and is never evicted.
// Nodes live in an arena indexed by int32 ids; a freed id bumps its generation so that a stale
// CacheHandle is detected instead of touching a reused node.
//
// Locks. lock_ref(node) = number of locked handles whose path passes through node; a lock walks
// node → root incrementing, so lock_ref(parent) >= sum of lock_ref(children). A node with
// lock_ref > 0 is protected; its tokens count in protected_size(), others in evictable_size().
//
// LRU. A logical clock ticks once per match_prefix / insert; every node on the touched path
// gets the tick, so last_access(parent) >= last_access(child). evict() pops unlocked leaves in
// (last_access, id) order; a parent that becomes an unlocked leaf joins the heap.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/prefix_cache.h"

namespace rlm {

class RadixCache final : public PrefixCache {
 public:
  explicit RadixCache(int32_t page_size);

  int32_t page_size() const override { return page_size_; }
  MatchResult match_prefix(std::span<const int32_t> tokens) override;
  InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) override;
  void lock(const CacheHandle& handle) override;
  void unlock(const CacheHandle& handle) override;
  std::vector<int32_t> evict(int64_t num_tokens) override;
  std::vector<int32_t> reset() override;
  int64_t evictable_size() const override { return evictable_size_; }
  int64_t protected_size() const override { return protected_size_; }
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
    // first-page hash -> child id; equal hashes are told apart by comparing the child's key
    std::unordered_multimap<uint64_t, int32_t> children;
    int32_t lock_ref = 0;
    uint64_t last_access = 0;
    uint32_t generation = 0;
    bool live = false;
  };

  // Where a walk ended: the deepest node whose whole key matched, and the matched length.
  struct WalkResult {
    int32_t node = kRoot;
    int32_t length = 0;
  };

  uint64_t page_hash(std::span<const int32_t> page) const;
  int32_t find_child(int32_t node, std::span<const int32_t> first_page) const;
  // Follows tokens[0, aligned) from the root, splitting the last node when the match ends inside
  // it, and stamps every node on the path with `tick`.
  WalkResult walk(std::span<const int32_t> tokens, uint64_t tick);
  // Splits node at offset (0 < offset < len, page multiple); returns the new upper node, which
  // holds key[0, offset). The original id keeps the lower part, so handles to it stay valid.
  int32_t split(int32_t node, int32_t offset);
  int32_t new_node();
  void free_node(int32_t id);
  void remove_child(int32_t parent, int32_t child);
  bool is_leaf(int32_t id) const { return nodes_[static_cast<size_t>(id)].children.empty(); }
  // Validates a handle (live node, generation, length == depth) or RLM_CHECK-fails.
  void check_handle(const CacheHandle& handle, const char* op) const;
  CacheHandle handle_of(int32_t id, int32_t length) const;

  Node& at(int32_t id) { return nodes_[static_cast<size_t>(id)]; }
  const Node& at(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }

  int32_t page_size_;
  std::vector<Node> nodes_;       // arena; nodes_[0] is the root
  std::vector<int32_t> free_ids_;  // dead arena entries available for reuse
  int32_t num_live_nodes_ = 1;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace rlm
