#include "cache/hybrid_radix_cache.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <sstream>
#include <unordered_set>
#include <utility>

#include "core/check.h"

namespace rlm {

HybridRadixCache::HybridRadixCache(int32_t page_size, int32_t chunk, MambaSlotRelease release)
    : page_size_(page_size), align_(0), release_(std::move(release)) {
  RLM_CHECK_GE(page_size, 1) << "HybridRadixCache page_size";
  RLM_CHECK_GE(chunk, 1) << "HybridRadixCache snapshot chunk size";
  RLM_CHECK(release_ != nullptr) << "HybridRadixCache needs a callback that frees snapshot slots";
  align_ = std::lcm(page_size, chunk);
  nodes_.emplace_back();
  at(kRoot).live = true;
}

uint64_t HybridRadixCache::page_hash(std::span<const int32_t> page) const {
  if (page_size_ == 1) return static_cast<uint32_t>(page[0]);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const int32_t t : page) {
    h ^= static_cast<uint32_t>(t);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

int32_t HybridRadixCache::find_child(int32_t node, std::span<const int32_t> first_page) const {
  const auto range = at(node).children.equal_range(page_hash(first_page));
  for (auto it = range.first; it != range.second; ++it) {
    const std::vector<int32_t>& key = at(it->second).key;
    if (std::equal(first_page.begin(), first_page.end(), key.begin())) return it->second;
  }
  return kNone;
}

int32_t HybridRadixCache::new_node() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = at(id);
  RLM_DCHECK(!n.live);
  n.live = true;
  n.parent = kNone;
  n.lock_ref = 0;
  n.last_access = 0;
  n.mamba = -1;
  n.mamba_access = 0;
  ++num_live_nodes_;
  return id;
}

void HybridRadixCache::free_node(int32_t id) {
  Node& n = at(id);
  n.live = false;
  std::vector<int32_t>().swap(n.key);
  std::vector<int32_t>().swap(n.value);
  n.children.clear();
  n.parent = kNone;
  RLM_DCHECK(n.mamba < 0);
  ++n.generation;
  free_ids_.push_back(id);
  --num_live_nodes_;
}

void HybridRadixCache::remove_child(int32_t parent, int32_t child) {
  auto& children = at(parent).children;
  const std::vector<int32_t>& key = at(child).key;
  const auto range = children.equal_range(page_hash({key.data(), static_cast<size_t>(page_size_)}));
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == child) {
      children.erase(it);
      return;
    }
  }
  RLM_FAIL() << "HybridRadixCache: node " << child << " missing from its parent " << parent;
}

int32_t HybridRadixCache::split(int32_t node, int32_t offset) {
  RLM_DCHECK(offset > 0 && offset % page_size_ == 0 && offset < static_cast<int32_t>(at(node).key.size()));
  const int32_t upper = new_node();  // may reallocate nodes_: take references only after this
  Node& lower = at(node);
  Node& up = at(upper);
  up.key.assign(lower.key.begin(), lower.key.begin() + offset);
  up.value.assign(lower.value.begin(), lower.value.begin() + offset);
  lower.key.erase(lower.key.begin(), lower.key.begin() + offset);
  lower.value.erase(lower.value.begin(), lower.value.begin() + offset);
  up.parent = lower.parent;
  up.lock_ref = lower.lock_ref;
  up.last_access = lower.last_access;
  // The upper part has the same first page, so the parent's entry only changes its target.
  auto& siblings = at(up.parent).children;
  const auto range = siblings.equal_range(page_hash({up.key.data(), static_cast<size_t>(page_size_)}));
  auto it = range.first;
  while (it != range.second && it->second != node) ++it;
  RLM_CHECK(it != range.second) << "HybridRadixCache: split node " << node << " missing from its parent";
  it->second = upper;
  lower.parent = upper;
  up.children.emplace(page_hash({lower.key.data(), static_cast<size_t>(page_size_)}), node);
  return upper;
}

HybridRadixCache::WalkResult HybridRadixCache::walk(std::span<const int32_t> tokens, uint64_t tick) {
  const size_t ps = static_cast<size_t>(page_size_);
  const size_t aligned = tokens.size() / ps * ps;
  int32_t node = kRoot;
  size_t pos = 0;
  while (pos < aligned) {
    int32_t child = find_child(node, tokens.subspan(pos, ps));
    if (child == kNone) break;
    const std::vector<int32_t>& key = at(child).key;
    const size_t limit = std::min(key.size(), aligned - pos);
    size_t m = static_cast<size_t>(
        std::mismatch(key.begin(), key.begin() + static_cast<std::ptrdiff_t>(limit), tokens.begin() + pos)
            .first -
        key.begin());
    m = m / ps * ps;
    RLM_DCHECK(m >= ps);
    const bool partial = m < key.size();
    if (partial) child = split(child, static_cast<int32_t>(m));
    at(child).last_access = tick;
    pos += m;
    node = child;
    if (partial) break;
  }
  return {node, static_cast<int32_t>(pos)};
}

CacheHandle HybridRadixCache::handle_of(int32_t id, int32_t length) const {
  return CacheHandle{id, at(id).generation, length};
}

int32_t HybridRadixCache::depth_of(int32_t id) const {
  int32_t depth = 0;
  for (int32_t n = id; n != kRoot; n = at(n).parent) depth += static_cast<int32_t>(at(n).key.size());
  return depth;
}

MatchResult HybridRadixCache::match_prefix(std::span<const int32_t> tokens) {
  const uint64_t tick = ++clock_;
  const WalkResult w = walk(tokens, tick);
  MatchResult result;
  result.handle = handle_of(w.node, w.length);
  // The resume point: the deepest node on the path with a snapshot.
  int32_t depth = w.length;
  for (int32_t n = w.node; n != kRoot; depth -= static_cast<int32_t>(at(n).key.size()), n = at(n).parent) {
    if (at(n).mamba >= 0) {
      at(n).mamba_access = tick;
      result.mamba_handle = handle_of(n, depth);
      result.mamba_slot = at(n).mamba;
      break;
    }
  }
  result.slots.resize(static_cast<size_t>(w.length));
  size_t end = result.slots.size();
  for (int32_t n = w.node; n != kRoot; n = at(n).parent) {
    const std::vector<int32_t>& value = at(n).value;
    end -= value.size();
    std::copy(value.begin(), value.end(), result.slots.begin() + static_cast<std::ptrdiff_t>(end));
  }
  RLM_DCHECK(end == 0);
  return result;
}

InsertResult HybridRadixCache::insert_with_snapshot(std::span<const int32_t> tokens,
                                                    std::span<const int32_t> slots, int32_t mamba_slot) {
  RLM_CHECK_EQ(tokens.size(), slots.size()) << "HybridRadixCache::insert needs one slot per token";
  if (mamba_slot >= 0) {
    RLM_CHECK(!tokens.empty() && tokens.size() % static_cast<size_t>(align_) == 0)
        << "HybridRadixCache::insert: a snapshot after " << tokens.size()
        << " tokens is not at a positive multiple of the snapshot alignment " << align_;
  }
  const size_t aligned = tokens.size() / static_cast<size_t>(page_size_) * static_cast<size_t>(page_size_);
  const uint64_t tick = ++clock_;
  const WalkResult w = walk(tokens, tick);
  const size_t pos = static_cast<size_t>(w.length);
  // Attaches the snapshot to the node that ends at `aligned` unless it already has one.
  auto with_snapshot = [&](InsertResult r) {
    if (mamba_slot < 0) return r;
    Node& end = at(r.handle.node);
    if (end.mamba < 0) {
      end.mamba = mamba_slot;
      ++num_snapshots_;
      r.mamba_taken = true;
    }
    end.mamba_access = tick;
    return r;
  };
  if (pos == aligned) return with_snapshot(InsertResult{w.length, handle_of(w.node, w.length)});
  for (size_t i = pos; i < aligned; ++i) {
    RLM_CHECK_GE(slots[i], 0) << "HybridRadixCache::insert: negative slot at token " << i;
  }
  const int32_t id = new_node();
  Node& leaf = at(id);
  leaf.key.assign(tokens.begin() + static_cast<std::ptrdiff_t>(pos),
                  tokens.begin() + static_cast<std::ptrdiff_t>(aligned));
  leaf.value.assign(slots.begin() + static_cast<std::ptrdiff_t>(pos),
                    slots.begin() + static_cast<std::ptrdiff_t>(aligned));
  leaf.parent = w.node;
  leaf.last_access = tick;
  at(w.node).children.emplace(page_hash({leaf.key.data(), static_cast<size_t>(page_size_)}), id);
  evictable_size_ += static_cast<int64_t>(aligned - pos);
  return with_snapshot(InsertResult{w.length, handle_of(id, static_cast<int32_t>(aligned))});
}

void HybridRadixCache::check_handle(const CacheHandle& handle, const char* op) const {
  RLM_CHECK(handle.node >= 0 && static_cast<size_t>(handle.node) < nodes_.size() && at(handle.node).live &&
            at(handle.node).generation == handle.generation)
      << "HybridRadixCache::" << op << ": stale or invalid handle (node " << handle.node << ", generation "
      << handle.generation << "): its prefix was evicted or the cache was reset";
  int64_t depth = 0;
  for (int32_t n = handle.node; n != kRoot; n = at(n).parent) depth += static_cast<int64_t>(at(n).key.size());
  RLM_CHECK_EQ(depth, static_cast<int64_t>(handle.length))
      << "HybridRadixCache::" << op << ": handle length does not match its node";
}

void HybridRadixCache::lock(const CacheHandle& handle) {
  check_handle(handle, "lock");
  for (int32_t n = handle.node; n != kRoot; n = at(n).parent) {
    Node& node = at(n);
    if (node.lock_ref == 0) {
      const int64_t len = static_cast<int64_t>(node.key.size());
      evictable_size_ -= len;
      protected_size_ += len;
    }
    ++node.lock_ref;
  }
}

void HybridRadixCache::unlock(const CacheHandle& handle) {
  check_handle(handle, "unlock");
  if (handle.node == kRoot) return;
  // lock_ref never increases towards the leaves, so checking the node covers its whole path.
  RLM_CHECK_GT(at(handle.node).lock_ref, 0) << "HybridRadixCache::unlock of a handle that is not locked";
  for (int32_t n = handle.node; n != kRoot; n = at(n).parent) {
    Node& node = at(n);
    --node.lock_ref;
    if (node.lock_ref == 0) {
      const int64_t len = static_cast<int64_t>(node.key.size());
      protected_size_ -= len;
      evictable_size_ += len;
    }
  }
}

std::vector<int32_t> HybridRadixCache::evict(int64_t num_tokens) {
  std::vector<int32_t> freed;
  if (num_tokens <= 0) return freed;
  using Entry = std::pair<uint64_t, int32_t>;  // (last_access, id): oldest first, ties by id
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t id = 1; id < static_cast<int32_t>(nodes_.size()); ++id) {
    const Node& n = at(id);
    if (n.live && n.children.empty() && n.lock_ref == 0) heap.emplace(n.last_access, id);
  }
  while (static_cast<int64_t>(freed.size()) < num_tokens && !heap.empty()) {
    const int32_t id = heap.top().second;
    heap.pop();
    const int32_t parent = at(id).parent;
    evict_leaf(id, freed);
    const Node& p = at(parent);
    if (parent != kRoot && p.children.empty() && p.lock_ref == 0) heap.emplace(p.last_access, parent);
  }
  return freed;
}

void HybridRadixCache::drop_snapshot(int32_t id) {
  Node& n = at(id);
  if (n.mamba < 0) return;
  const int32_t slot = n.mamba;
  n.mamba = -1;
  --num_snapshots_;
  release_(slot);
}

void HybridRadixCache::evict_leaf(int32_t id, std::vector<int32_t>& freed) {
  RLM_DCHECK(id != kRoot && is_leaf(id) && at(id).lock_ref == 0);
  drop_snapshot(id);
  const Node& n = at(id);
  const int32_t parent = n.parent;
  freed.insert(freed.end(), n.value.begin(), n.value.end());
  evictable_size_ -= static_cast<int64_t>(n.value.size());
  remove_child(parent, id);
  free_node(id);
}

std::vector<int32_t> HybridRadixCache::evict_mamba(int64_t num_snapshots) {
  std::vector<int32_t> freed;
  if (num_snapshots <= 0) return freed;
  using Entry = std::pair<uint64_t, int32_t>;  // (mamba_access, id): oldest first, ties by id
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int32_t id = 1; id < static_cast<int32_t>(nodes_.size()); ++id) {
    const Node& n = at(id);
    if (n.live && n.mamba >= 0) heap.emplace(n.mamba_access, id);
  }
  // Only leaves holding a snapshot are freed here (each popped once) and no node is created, so
  // every entry still in the heap names a live node.
  int64_t dropped = 0;
  while (dropped < num_snapshots && !heap.empty()) {
    const int32_t id = heap.top().second;
    heap.pop();
    if (is_leaf(id) && at(id).lock_ref == 0) {
      evict_leaf(id, freed);  // a leaf without its state is dead weight: the KV goes too
    } else {
      drop_snapshot(id);  // tombstone: the KV stays for requests that resume deeper
    }
    ++dropped;
  }
  return freed;
}

std::vector<int32_t> HybridRadixCache::reset() {
  RLM_CHECK_EQ(protected_size_, 0) << "HybridRadixCache::reset while requests hold locked prefixes";
  std::vector<int32_t> freed;
  freed.reserve(static_cast<size_t>(evictable_size_));
  for (int32_t id = 1; id < static_cast<int32_t>(nodes_.size()); ++id) {
    if (!at(id).live) continue;
    drop_snapshot(id);
    freed.insert(freed.end(), at(id).value.begin(), at(id).value.end());
    free_node(id);
  }
  at(kRoot).children.clear();
  evictable_size_ = 0;
  return freed;
}

Status HybridRadixCache::check_integrity() const {
  auto broken = [](const std::string& what) { return internal_error("HybridRadixCache integrity: " + what); };
  const Node& root = at(kRoot);
  if (!root.live || !root.key.empty() || !root.value.empty() || root.parent != kNone || root.lock_ref != 0 ||
      root.generation != 0 || root.mamba >= 0) {
    return broken("the root must be live, empty, parentless, unlocked and without a snapshot");
  }
  const size_t ps = static_cast<size_t>(page_size_);
  int64_t evictable = 0, protected_tokens = 0;
  int32_t live = 0;
  std::unordered_set<int32_t> slots;
  std::unordered_set<int32_t> snapshots;
  for (int32_t id = 0; id < static_cast<int32_t>(nodes_.size()); ++id) {
    const Node& n = at(id);
    if (!n.live) continue;
    ++live;
    const std::string name = str("node ", id);
    int64_t child_locks = 0;
    for (const auto& [hash, child] : n.children) {
      if (child <= kRoot || static_cast<size_t>(child) >= nodes_.size() || !at(child).live) {
        return broken(str(name, " has a dead or invalid child ", child));
      }
      const Node& c = at(child);
      if (c.parent != id) return broken(str("child ", child, " of ", name, " names parent ", c.parent));
      if (c.key.size() < ps || hash != page_hash({c.key.data(), ps})) {
        return broken(str("child ", child, " of ", name, " is keyed by a hash that is not its first page's"));
      }
      if (find_child(id, {c.key.data(), ps}) != child) {
        return broken(str(name, " has two children with the same first page"));
      }
      child_locks += c.lock_ref;
      if (id != kRoot && c.last_access > n.last_access) {
        return broken(str("child ", child, " was used after its parent ", id));
      }
    }
    if (id != kRoot && n.lock_ref < child_locks) {
      return broken(str(name, " lock_ref ", n.lock_ref, " < sum of its children's ", child_locks));
    }
    if (id == kRoot) continue;
    if (n.key.empty() || n.key.size() % ps != 0) {
      return broken(str(name, " holds ", n.key.size(), " tokens, not a positive multiple of page_size ", ps));
    }
    if (n.value.size() != n.key.size())
      return broken(str(name, " has ", n.value.size(), " slots for ", n.key.size(), " tokens"));
    if (n.lock_ref < 0) return broken(str(name, " has negative lock_ref ", n.lock_ref));
    if (n.last_access > clock_) return broken(str(name, " was used in the future"));
    if (n.parent < 0 || static_cast<size_t>(n.parent) >= nodes_.size() || !at(n.parent).live) {
      return broken(str(name, " has a dead or invalid parent ", n.parent));
    }
    if (find_child(n.parent, {n.key.data(), ps}) != id)
      return broken(str(name, " is not listed by its parent"));
    for (const int32_t slot : n.value) {
      if (slot < 0) return broken(str(name, " holds a negative slot ", slot));
      if (!slots.insert(slot).second) return broken(str("slot ", slot, " is cached twice"));
    }
    if (n.mamba >= 0) {
      const int32_t depth = depth_of(id);
      if (depth % align_ != 0) {
        return broken(str(name, " has a snapshot at depth ", depth, ", not a multiple of ", align_));
      }
      if (!snapshots.insert(n.mamba).second)
        return broken(str("snapshot slot ", n.mamba, " is cached twice"));
      if (n.mamba_access > clock_) return broken(str(name, "'s snapshot was used in the future"));
    }
    (n.lock_ref > 0 ? protected_tokens : evictable) += static_cast<int64_t>(n.key.size());
  }
  if (live != num_live_nodes_) return broken(str(live, " live nodes, counter says ", num_live_nodes_));
  if (static_cast<size_t>(live) + free_ids_.size() != nodes_.size())
    return broken("free id list is out of sync");
  for (const int32_t id : free_ids_) {
    if (at(id).live) return broken(str("live node ", id, " is on the free list"));
  }
  // Every live node must be reachable from the root exactly once (no cycles, no orphans).
  int32_t reached = 0;
  std::vector<int32_t> stack = {kRoot};
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    if (++reached > live) return broken("the tree has a cycle");
    for (const auto& entry : at(id).children) stack.push_back(entry.second);
  }
  if (reached != live) return broken(str(live - reached, " live nodes are unreachable from the root"));
  if (static_cast<int64_t>(snapshots.size()) != num_snapshots_) {
    return broken(str(snapshots.size(), " snapshots in nodes, counter says ", num_snapshots_));
  }
  if (evictable != evictable_size_ || protected_tokens != protected_size_) {
    return broken(str("sizes: evictable ", evictable_size_, " (nodes say ", evictable, "), protected ",
                      protected_size_, " (nodes say ", protected_tokens, ")"));
  }
  return Status::ok();
}

std::string HybridRadixCache::to_string() const {
  std::ostringstream os;
  os << "HybridRadixCache(page_size=" << page_size_ << ", nodes=" << num_live_nodes_
     << ", evictable=" << evictable_size_ << ", protected=" << protected_size_
     << ", snapshots=" << num_snapshots_ << ", align=" << align_ << ", clock=" << clock_ << ")\n";
  constexpr size_t kShown = 8;
  // Depth-first with children in first-token order, so the dump is deterministic.
  std::vector<std::pair<int32_t, int>> stack = {{kRoot, 0}};
  while (!stack.empty()) {
    const auto [id, depth] = stack.back();
    stack.pop_back();
    const Node& n = at(id);
    if (id != kRoot) {
      os << std::string(static_cast<size_t>(depth) * 2, ' ') << "#" << id << " [";
      for (size_t i = 0; i < std::min(n.key.size(), kShown); ++i) os << (i ? " " : "") << n.key[i];
      if (n.key.size() > kShown) os << " ...";
      os << "] len=" << n.key.size() << " slots=[" << n.value.front() << (n.value.size() > 1 ? " .." : "")
         << "] lock=" << n.lock_ref << " t=" << n.last_access;
      if (n.mamba >= 0) {
        os << " mamba=" << n.mamba << " mt=" << n.mamba_access;
      } else {
        os << " tombstone";
      }
      os << "\n";
    }
    std::vector<int32_t> kids;
    for (const auto& entry : n.children) kids.push_back(entry.second);
    std::sort(kids.begin(), kids.end(), [this](int32_t a, int32_t b) { return at(a).key > at(b).key; });
    for (const int32_t k : kids) stack.emplace_back(k, depth + 1);
  }
  return os.str();
}

}  // namespace rlm
