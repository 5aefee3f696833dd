#include "cache/radix_cache.h"

#include <ostream>

namespace rlm {

void KvSlots::split_into(KvSlots& upper, int32_t offset) {
  upper.slots.assign(slots.begin(), slots.begin() + offset);
  slots.erase(slots.begin(), slots.begin() + offset);
}

namespace kv_tree {

void append_slots(const KvSlots& kv, std::vector<int32_t>& out) { out.insert(out.end(), kv.slots.begin(), kv.slots.end()); }

Status check_node(const RadixTreeBase& tree, int32_t id, const KvSlots& kv, std::unordered_set<int32_t>& seen) {
  const size_t len = tree.key(id).size();
  if (kv.slots.size() != len) return tree.broken(str("node ", id, " has ", kv.slots.size(), " slots for ", len, " tokens"));
  for (const int32_t slot : kv.slots) {
    if (slot < 0) return tree.broken(str("node ", id, " holds a negative slot ", slot));
    if (!seen.insert(slot).second) return tree.broken(str("slot ", slot, " is cached twice"));
  }
  return Status::ok();
}

void describe(const KvSlots& kv, std::ostream& os) {
  os << " slots=[" << (kv.slots.empty() ? -1 : kv.slots.front()) << (kv.slots.size() > 1 ? " .." : "") << "]";
}

}  // namespace kv_tree

RadixCache::RadixCache(int32_t page_size) : tree_(page_size, "RadixCache") {}

std::vector<int32_t> RadixCache::evict(int64_t num_tokens) {
  std::vector<int32_t> freed;
  tree_.evict_lru(num_tokens, [&](int32_t id) { kv_tree::append_slots(tree_.payload(id), freed); });
  return freed;
}

std::vector<int32_t> RadixCache::reset() {
  std::vector<int32_t> freed;
  freed.reserve(static_cast<size_t>(tree_.evictable_size()));
  tree_.clear([&](int32_t id) { kv_tree::append_slots(tree_.payload(id), freed); }, "reset");
  return freed;
}

Status RadixCache::check_integrity() const {
  RLM_RETURN_IF_ERROR(tree_.check_integrity());
  return kv_tree::check(tree_);
}

std::string RadixCache::to_string() const {
  const std::string header = str("RadixCache(page_size=", tree_.page_size(), ", nodes=", tree_.num_nodes(),
                                 ", evictable=", tree_.evictable_size(), ", protected=", tree_.protected_size(),
                                 ", clock=", tree_.clock(), ")");
  return tree_.to_string(header, [this](int32_t id, std::ostream& os) { kv_tree::describe(tree_.payload(id), os); });
}

}  // namespace rlm
