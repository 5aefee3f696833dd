// RadixCache: the prefix cache of SGLang's RadixAttention: a RadixTree (radix_tree.h: walk, split,
// arena, locks, LRU, structural checks) whose node payload is the KV slot index of each of the
// node's tokens. See prefix_cache.h for the ownership contract and docs/design/radix_cache.md for
// the design.
//
// What this file adds to the tree: the payload (KvSlots), match_prefix gathering the matched path's
// slots, insert storing the new tokens' slots in a new leaf, LRU eviction handing the evicted leaves'
// slots back, and the slot checks (one slot per token, none negative, none cached twice).
// HybridRadixCache's payload extends KvSlots, so the KV functions below serve both caches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/prefix_cache.h"
#include "cache/radix_tree.h"
#include "core/check.h"

namespace rlm {

// A node's KV payload: one slot per token of its key.
struct KvSlots {
  std::vector<int32_t> slots;  // [node tokens] KV slot indices

  // The upper node of a split takes the slots of the first `offset` tokens.
  void split_into(KvSlots& upper, int32_t offset);
};

// The KV part of a radix cache over a RadixTree whose Payload is, or derives from, KvSlots.
namespace kv_tree {

// Ticks the clock and walks tokens; the match with the slots of its path.
template <typename Payload>
MatchResult match(RadixTree<Payload>& tree, std::span<const int32_t> tokens);

// Ticks the clock, walks tokens and hangs one leaf holding the rest of the page-aligned tokens
// with their slots (slots.size() == tokens.size(), none of the new ones negative).
template <typename Payload>
InsertResult insert(RadixTree<Payload>& tree, std::span<const int32_t> tokens, std::span<const int32_t> slots);

// Appends the node's slots to out.
void append_slots(const KvSlots& kv, std::vector<int32_t>& out);

// One slot per token, no negative slot, no slot cached twice, none at the root.
template <typename Payload>
Status check(const RadixTree<Payload>& tree);

// " slots=[first ..]" for to_string().
void describe(const KvSlots& kv, std::ostream& os);

}  // namespace kv_tree

class RadixCache final : public PrefixCache {
 public:
  explicit RadixCache(int32_t page_size);

  int32_t page_size() const override { return tree_.page_size(); }
  MatchResult match_prefix(std::span<const int32_t> tokens) override { return kv_tree::match(tree_, tokens); }
  InsertResult insert(std::span<const int32_t> tokens, std::span<const int32_t> slots) override {
    return kv_tree::insert(tree_, tokens, slots);
  }
  void lock(const CacheHandle& handle) override { tree_.lock(handle); }
  void unlock(const CacheHandle& handle) override { tree_.unlock(handle); }
  std::vector<int32_t> evict(int64_t num_tokens) override;
  std::vector<int32_t> reset() override;
  void set_observer(CacheEventObserver* observer) override { tree_.set_observer(observer); }
  int64_t evictable_size() const override { return tree_.evictable_size(); }
  int64_t protected_size() const override { return tree_.protected_size(); }
  Status check_integrity() const override;
  std::string to_string() const override;

  int32_t num_nodes() const { return tree_.num_nodes(); }  // including the root
  uint64_t clock() const { return tree_.clock(); }

 private:
  RadixTree<KvSlots> tree_;
};

// ---- kv_tree templates ----------------------------------------------------------------------

namespace kv_tree {

// Checks one node's slots against its key and the slots seen so far.
Status check_node(const RadixTreeBase& tree, int32_t id, const KvSlots& kv, std::unordered_set<int32_t>& seen);

template <typename Payload>
MatchResult match(RadixTree<Payload>& tree, std::span<const int32_t> tokens) {
  const RadixTreeBase::WalkResult w = tree.walk(tokens, tree.tick());
  MatchResult result;
  result.handle = tree.handle_of(w.node, w.length);
  result.slots.resize(static_cast<size_t>(w.length));
  size_t end = result.slots.size();
  for (int32_t n = w.node; n != RadixTreeBase::kRoot; n = tree.parent(n)) {
    const std::vector<int32_t>& slots = static_cast<const KvSlots&>(tree.payload(n)).slots;
    end -= slots.size();
    std::copy(slots.begin(), slots.end(), result.slots.begin() + static_cast<std::ptrdiff_t>(end));
  }
  RLM_DCHECK(end == 0);
  return result;
}

template <typename Payload>
InsertResult insert(RadixTree<Payload>& tree, std::span<const int32_t> tokens, std::span<const int32_t> slots) {
  RLM_CHECK_EQ(tokens.size(), slots.size()) << tree.name() << "::insert needs one slot per token";
  const size_t ps = static_cast<size_t>(tree.page_size());
  const size_t aligned = tokens.size() / ps * ps;
  const uint64_t tick = tree.tick();
  const RadixTreeBase::WalkResult w = tree.walk(tokens, tick);
  const size_t pos = static_cast<size_t>(w.length);
  if (pos == aligned) return InsertResult{w.length, tree.handle_of(w.node, w.length)};
  for (size_t i = pos; i < aligned; ++i) {
    RLM_CHECK_GE(slots[i], 0) << tree.name() << "::insert: negative slot at token " << i;
  }
  const int32_t id = tree.add_leaf(w.node, tokens.subspan(pos, aligned - pos), tick);
  KvSlots& kv = tree.payload(id);
  kv.slots.assign(slots.begin() + static_cast<std::ptrdiff_t>(pos), slots.begin() + static_cast<std::ptrdiff_t>(aligned));
  return InsertResult{w.length, tree.handle_of(id, static_cast<int32_t>(aligned))};
}

template <typename Payload>
Status check(const RadixTree<Payload>& tree) {
  if (!static_cast<const KvSlots&>(tree.payload(RadixTreeBase::kRoot)).slots.empty()) {
    return tree.broken("the root holds slots");
  }
  std::unordered_set<int32_t> seen;
  Status status;
  tree.for_each_node([&](int32_t id) {
    if (status.is_ok()) status = check_node(tree, id, tree.payload(id), seen);
  });
  return status;
}

}  // namespace kv_tree
}  // namespace rlm
