// RadixTree: the one radix tree over token ids that both radix prefix caches are built on (SGLang's
// RadixAttention tree). One tree, many payloads: the tree walks, splits, locks, keeps the LRU order
// and checks its own structure; a cache adds only what its nodes carry (a Payload: RadixCache the KV
// slots of the node's tokens, HybridRadixCache those plus a recurrent-state snapshot) and its own
// eviction rule on top of evict_lru(). See docs/design/radix_cache.md.
//
// Nodes. Node = a run of tokens (key), a parent, children keyed by the child's first page of
// tokens, a lock count, a last-access tick and a payload. Every non-root node holds a non-empty
// multiple of page_size tokens; the root holds nothing and is never removed. Nodes live in an arena
// indexed by int32 ids with a free list; a freed id bumps its generation so that a stale CacheHandle
// is detected instead of touching a reused node.
//
// Locks. lock_ref(node) = number of locked handles whose path passes through node; a lock walks
// node -> root incrementing, so lock_ref(parent) >= sum of lock_ref(children). A node with
// lock_ref > 0 is protected; its tokens count in protected_size(), others in evictable_size().
//
// LRU. A logical clock ticks once per cache operation that touches the tree (tick()); every node on
// a walked path gets the tick, so last_access(parent) >= last_access(child). evict_lru() removes
// unlocked leaves in (last_access, id) order; a parent that becomes an unlocked leaf joins them.
//
// Payload. RadixTree<Payload> keeps one Payload per arena entry: default-constructed (empty) when a
// node is created, reset to Payload{} when it is freed. The only requirement is
//   void split_into(Payload& upper, int32_t offset);
// called when a node is split at `offset` tokens: it moves what belongs to the first `offset` tokens
// into `upper` (a fresh payload, the new upper node's) and keeps the rest.
//
// Threading: not thread-safe; the cache's owner (the scheduler thread) owns the tree.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/cache_events.h"
#include "cache/prefix_cache.h"
#include "core/status.h"

namespace rlm {

// Ids in least-recently-used order: pops the smallest (stamp, id) first, so ties go by id. The
// eviction order of evict_lru() and of a cache's own eviction rules (HybridRadixCache's snapshots).
// A binary min-heap written out so that push and pop inline into the eviction loops: evict_lru
// pushes every unlocked leaf on each call.
class LruQueue {
 public:
  void reserve(size_t n) { heap_.reserve(n); }
  bool empty() const { return heap_.empty(); }
  void push(uint64_t stamp, int32_t id) {
    const Entry e{stamp, id};
    size_t hole = heap_.size();
    heap_.push_back(e);
    while (hole > 0) {  // sift up
      const size_t parent = (hole - 1) / 2;
      if (!before(e, heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = e;
  }
  int32_t pop() {
    const int32_t id = heap_.front().id;
    const Entry last = heap_.back();
    heap_.pop_back();
    const size_t n = heap_.size();
    size_t hole = 0;
    while (true) {  // sift `last` down from the root
      size_t child = 2 * hole + 1;
      if (child >= n) break;
      if (child + 1 < n && before(heap_[child + 1], heap_[child])) ++child;
      if (!before(heap_[child], last)) break;
      heap_[hole] = heap_[child];
      hole = child;
    }
    if (n > 0) heap_[hole] = last;
    return id;
  }

 private:
  struct Entry {
    uint64_t stamp;
    int32_t id;
  };
  static bool before(const Entry& a, const Entry& b) { return a.stamp < b.stamp || (a.stamp == b.stamp && a.id < b.id); }
  std::vector<Entry> heap_;  // a binary min-heap: heap_[0] comes first
};

// The tree without its payload: everything here is independent of what a node carries. A cache
// uses RadixTree<Payload> below; the payload hooks are its three virtual functions.
class RadixTreeBase {
 public:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;

  // page_size >= 1. name (the cache's class name) prefixes error and integrity messages.
  RadixTreeBase(int32_t page_size, std::string name);
  virtual ~RadixTreeBase() = default;
  RadixTreeBase(const RadixTreeBase&) = delete;
  RadixTreeBase& operator=(const RadixTreeBase&) = delete;

  int32_t page_size() const { return page_size_; }
  const std::string& name() const { return name_; }
  int64_t evictable_size() const { return evictable_size_; }  // tokens of unlocked nodes
  int64_t protected_size() const { return protected_size_; }  // tokens of locked nodes
  int32_t num_nodes() const { return num_live_nodes_; }       // including the root
  uint64_t clock() const { return clock_; }
  // Advances the logical clock: one tick per match or insert; the new tick stamps what it touches.
  uint64_t tick() { return ++clock_; }

  // ---- nodes (id must be live) ----
  std::span<const int32_t> key(int32_t id) const { return at(id).key; }
  int32_t parent(int32_t id) const { return at(id).parent; }
  int32_t lock_ref(int32_t id) const { return at(id).lock_ref; }
  uint64_t last_access(int32_t id) const { return at(id).last_access; }
  bool is_leaf(int32_t id) const { return at(id).children.empty(); }
  bool is_live(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < nodes_.size() && at(id).live; }
  int32_t depth(int32_t id) const;  // tokens from the root to the end of id
  // The handle naming id; length must be depth(id) (callers know it from their walk).
  CacheHandle handle_of(int32_t id, int32_t length) const { return CacheHandle{id, at(id).generation, length}; }
  // Calls f(id) for every live non-root node, in increasing id order.
  template <typename F>
  void for_each_node(F&& f) const {
    for (int32_t id = 1; id < static_cast<int32_t>(nodes_.size()); ++id) {
      if (at(id).live) f(id);
    }
  }

  // ---- match / insert ----
  // Where a walk ended: the deepest node whose whole key matched, and the matched length.
  struct WalkResult {
    int32_t node = kRoot;
    int32_t length = 0;
  };
  // Follows tokens[0, floor(n / page_size) * page_size) from the root, splitting the last node when
  // the match ends inside it (so the result always ends on a node boundary), and stamps every node
  // on the matched path with `tick`. Never changes what is cached or the sizes.
  WalkResult walk(std::span<const int32_t> tokens, uint64_t tick);
  // Hangs a new leaf under `parent` holding `key` (a positive multiple of page_size that continues
  // parent's path where no child does), stamped with `tick`; its tokens count as evictable. Returns
  // its id; its payload is fresh (the caller fills it).
  int32_t add_leaf(int32_t parent, std::span<const int32_t> key, uint64_t tick);

  // ---- locks ----
  // Validates a handle (live node, its generation, length == depth) or RLM_CHECK-fails naming op.
  void check_handle(const CacheHandle& handle, const char* op) const;
  // lock protects the handle's node and every node above it; unlock undoes one lock (more unlocks
  // than locks is an RLM_CHECK error). The root handle is always valid and never counts.
  void lock(const CacheHandle& handle);
  void unlock(const CacheHandle& handle);

  // ---- removal ----
  // Removes unlocked leaves oldest first (last_access, then id; a parent that becomes an unlocked
  // leaf joins the queue) until at least num_tokens tokens are removed or nothing evictable is left.
  // on_evict(id) runs for each leaf just before it goes, with its payload still in place; it must
  // not change the tree. Returns the tokens removed (whole nodes: may exceed num_tokens).
  int64_t evict_lru(int64_t num_tokens, const std::function<void(int32_t id)>& on_evict);
  // Removes one unlocked non-root leaf; its payload is reset.
  void remove_leaf(int32_t id);
  // Removes every node but the root; requires protected_size() == 0 (else RLM_CHECK-fails, naming
  // `op`). on_remove(id) runs for each node first.
  void clear(const std::function<void(int32_t id)>& on_remove, const char* op);

  // ---- observer ----
  // Told of every leaf added (add_leaf), every leaf removed (remove_leaf, evict_lru) and every
  // clear(); null (the default) tells no one. Not owned; must outlive the tree or be unset.
  void set_observer(CacheEventObserver* observer) { observer_ = observer; }
  // The tokens from the root to the end of id.
  std::vector<int32_t> path_tokens(int32_t id) const;

  // ---- checks and dumps ----
  // Every structural invariant: root, parent/child links and first-page keys, page multiples, lock
  // sums, LRU order, arena and free list, reachability, the two size counters. A failure names the
  // first broken one. Payload invariants are the cache's.
  Status check_integrity() const;
  // Formats "<name> integrity: <what>" as the internal error check_integrity() returns.
  Status broken(const std::string& what) const;
  // A deterministic depth-first dump (children in key order) after the header line: one line per
  // node with its id, first tokens, length, locks and tick; describe(id, os) appends the payload.
  std::string to_string(const std::string& header,
                        const std::function<void(int32_t id, std::ostream& os)>& describe) const;

 protected:
  // Payload hooks (RadixTree<Payload> implements them): the arena's capacity grew to n entries
  // (ids below n need a payload); node `upper` (new) took the first `offset` tokens of `lower`;
  // node `id` was freed.
  virtual void resize_payloads(size_t n) = 0;
  virtual void split_payload(int32_t upper, int32_t lower, int32_t offset) = 0;
  virtual void reset_payload(int32_t id) = 0;
  size_t arena_capacity() const { return nodes_.capacity(); }  // the payloads' size

 private:
  friend class RadixTreeTestPeer;  // tests corrupt nodes to see check_integrity() catch it

  struct Node {
    std::vector<int32_t> key;  // [len] token ids; len % page_size == 0, len > 0 unless root
    int32_t parent = kNone;
    // first-page hash -> child id; equal hashes are told apart by comparing the child's key
    std::unordered_multimap<uint64_t, int32_t> children;
    int32_t lock_ref = 0;
    uint64_t last_access = 0;
    uint32_t generation = 0;
    bool live = false;
  };

  uint64_t page_hash(std::span<const int32_t> page) const;
  uint64_t first_page_hash(int32_t id) const { return page_hash({at(id).key.data(), static_cast<size_t>(page_size_)}); }
  int32_t find_child(int32_t node, std::span<const int32_t> first_page) const;
  // Splits node at offset (0 < offset < len, page multiple); returns the new upper node, which
  // holds key[0, offset). The original id keeps the lower part (and its handles stay valid).
  int32_t split(int32_t node, int32_t offset);
  int32_t new_node();
  void free_node(int32_t id);
  void remove_child(int32_t parent, int32_t child);

  Node& at(int32_t id) { return nodes_[static_cast<size_t>(id)]; }
  const Node& at(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }

  int32_t page_size_;
  std::string name_;
  std::vector<Node> nodes_;        // arena; nodes_[0] is the root
  std::vector<int32_t> free_ids_;  // dead arena entries available for reuse
  int32_t num_live_nodes_ = 1;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
  uint64_t clock_ = 0;
  CacheEventObserver* observer_ = nullptr;
};

template <typename Payload>
class RadixTree final : public RadixTreeBase {
 public:
  RadixTree(int32_t page_size, std::string name)
      : RadixTreeBase(page_size, std::move(name)), payloads_(arena_capacity()) {}

  Payload& payload(int32_t id) { return payloads_[static_cast<size_t>(id)]; }
  const Payload& payload(int32_t id) const { return payloads_[static_cast<size_t>(id)]; }

 private:
  void resize_payloads(size_t n) override { payloads_.resize(n); }
  void split_payload(int32_t upper, int32_t lower, int32_t offset) override {
    payload(lower).split_into(payload(upper), offset);
  }
  void reset_payload(int32_t id) override { payload(id) = Payload{}; }

  std::vector<Payload> payloads_;  // [arena capacity] one per node id
};

}  // namespace rlm
