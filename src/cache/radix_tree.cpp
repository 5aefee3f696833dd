#include "cache/radix_tree.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "core/check.h"

namespace rlm {

RadixTreeBase::RadixTreeBase(int32_t page_size, std::string name) : page_size_(page_size), name_(std::move(name)) {
  RLM_CHECK_GE(page_size, 1) << name_ << " page_size";
  nodes_.emplace_back();
  at(kRoot).live = true;
}

uint64_t RadixTreeBase::page_hash(std::span<const int32_t> page) const {
  if (page_size_ == 1) return static_cast<uint32_t>(page[0]);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const int32_t t : page) {
    h ^= static_cast<uint32_t>(t);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

int32_t RadixTreeBase::find_child(int32_t node, std::span<const int32_t> first_page) const {
  const auto range = at(node).children.equal_range(page_hash(first_page));
  for (auto it = range.first; it != range.second; ++it) {
    const std::vector<int32_t>& key = at(it->second).key;
    if (std::equal(first_page.begin(), first_page.end(), key.begin())) return it->second;
  }
  return kNone;
}

int32_t RadixTreeBase::depth(int32_t id) const {
  int32_t d = 0;
  for (int32_t n = id; n != kRoot; n = at(n).parent) d += static_cast<int32_t>(at(n).key.size());
  return d;
}

int32_t RadixTreeBase::new_node() {
  int32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    const size_t capacity = nodes_.capacity();
    nodes_.emplace_back();
    if (nodes_.capacity() != capacity) resize_payloads(nodes_.capacity());  // payloads grow with the arena
  }
  Node& n = at(id);
  RLM_DCHECK(!n.live);
  n.live = true;
  n.parent = kNone;
  n.lock_ref = 0;
  n.last_access = 0;
  ++num_live_nodes_;
  return id;
}

void RadixTreeBase::free_node(int32_t id) {
  Node& n = at(id);
  n.live = false;
  std::vector<int32_t>().swap(n.key);
  n.children.clear();
  n.parent = kNone;
  ++n.generation;
  reset_payload(id);
  free_ids_.push_back(id);
  --num_live_nodes_;
}

void RadixTreeBase::remove_child(int32_t parent, int32_t child) {
  auto& children = at(parent).children;
  const auto range = children.equal_range(first_page_hash(child));
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == child) {
      children.erase(it);
      return;
    }
  }
  RLM_FAIL() << name_ << ": node " << child << " missing from its parent " << parent;
}

int32_t RadixTreeBase::split(int32_t node, int32_t offset) {
  RLM_DCHECK(offset > 0 && offset % page_size_ == 0 && offset < static_cast<int32_t>(at(node).key.size()));
  const int32_t upper = new_node();  // may reallocate nodes_: take references only after this
  Node& lower = at(node);
  Node& up = at(upper);
  up.key.assign(lower.key.begin(), lower.key.begin() + offset);
  lower.key.erase(lower.key.begin(), lower.key.begin() + offset);
  up.parent = lower.parent;
  up.lock_ref = lower.lock_ref;
  up.last_access = lower.last_access;
  split_payload(upper, node, offset);
  // The upper part has the same first page, so the parent's entry only changes its target.
  auto& siblings = at(up.parent).children;
  const auto range = siblings.equal_range(first_page_hash(upper));
  auto it = range.first;
  while (it != range.second && it->second != node) ++it;
  RLM_CHECK(it != range.second) << name_ << ": split node " << node << " missing from its parent";
  it->second = upper;
  lower.parent = upper;
  up.children.emplace(first_page_hash(node), node);
  return upper;
}

RadixTreeBase::WalkResult RadixTreeBase::walk(std::span<const int32_t> tokens, uint64_t tick) {
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
        std::mismatch(key.begin(), key.begin() + static_cast<std::ptrdiff_t>(limit), tokens.begin() + pos).first -
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

int32_t RadixTreeBase::add_leaf(int32_t parent, std::span<const int32_t> key, uint64_t tick) {
  RLM_DCHECK(!key.empty() && key.size() % static_cast<size_t>(page_size_) == 0 &&
             find_child(parent, key.first(static_cast<size_t>(page_size_))) == kNone);
  const int32_t id = new_node();
  Node& leaf = at(id);
  leaf.key.assign(key.begin(), key.end());
  leaf.parent = parent;
  leaf.last_access = tick;
  at(parent).children.emplace(first_page_hash(id), id);
  evictable_size_ += static_cast<int64_t>(key.size());
  if (observer_ != nullptr) {
    const std::vector<int32_t> path = path_tokens(id);
    observer_->on_stored(path, path.size() - key.size());
  }
  return id;
}

std::vector<int32_t> RadixTreeBase::path_tokens(int32_t id) const {
  std::vector<int32_t> path(static_cast<size_t>(depth(id)));
  size_t end = path.size();
  for (int32_t n = id; n != kRoot; n = at(n).parent) {
    const std::vector<int32_t>& key = at(n).key;
    end -= key.size();
    std::copy(key.begin(), key.end(), path.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return path;
}

void RadixTreeBase::check_handle(const CacheHandle& handle, const char* op) const {
  RLM_CHECK(is_live(handle.node) && at(handle.node).generation == handle.generation)
      << name_ << "::" << op << ": stale or invalid handle (node " << handle.node << ", generation "
      << handle.generation << "): its prefix was evicted or the cache was reset";
  RLM_CHECK_EQ(depth(handle.node), handle.length) << name_ << "::" << op << ": handle length does not match its node";
}

void RadixTreeBase::lock(const CacheHandle& handle) {
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

void RadixTreeBase::unlock(const CacheHandle& handle) {
  check_handle(handle, "unlock");
  if (handle.node == kRoot) return;
  // lock_ref never increases towards the leaves, so checking the node covers its whole path.
  RLM_CHECK_GT(at(handle.node).lock_ref, 0) << name_ << "::unlock of a handle that is not locked";
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

void RadixTreeBase::remove_leaf(int32_t id) {
  RLM_DCHECK(id != kRoot && is_live(id) && is_leaf(id) && at(id).lock_ref == 0);
  if (observer_ != nullptr) {
    const std::vector<int32_t> path = path_tokens(id);
    observer_->on_removed(path, path.size() - at(id).key.size());
  }
  evictable_size_ -= static_cast<int64_t>(at(id).key.size());
  remove_child(at(id).parent, id);
  free_node(id);
}

int64_t RadixTreeBase::evict_lru(int64_t num_tokens, const std::function<void(int32_t id)>& on_evict) {
  if (num_tokens <= 0) return 0;
  LruQueue queue;
  queue.reserve(static_cast<size_t>(num_live_nodes_));  // an upper bound on the leaves
  for_each_node([&](int32_t id) {
    const Node& n = at(id);
    if (n.children.empty() && n.lock_ref == 0) queue.push(n.last_access, id);
  });
  int64_t removed = 0;
  while (removed < num_tokens && !queue.empty()) {
    const int32_t id = queue.pop();
    const int32_t parent = at(id).parent;
    on_evict(id);
    removed += static_cast<int64_t>(at(id).key.size());
    remove_leaf(id);
    const Node& p = at(parent);
    if (parent != kRoot && p.children.empty() && p.lock_ref == 0) queue.push(p.last_access, parent);
  }
  return removed;
}

void RadixTreeBase::clear(const std::function<void(int32_t id)>& on_remove, const char* op) {
  RLM_CHECK_EQ(protected_size_, 0) << name_ << "::" << op << " while requests hold locked prefixes";
  if (observer_ != nullptr) observer_->on_cleared();
  for_each_node([&](int32_t id) {
    on_remove(id);
    free_node(id);
  });
  at(kRoot).children.clear();
  evictable_size_ = 0;
}

Status RadixTreeBase::broken(const std::string& what) const {
  return internal_error(name_ + " integrity: " + what);
}

Status RadixTreeBase::check_integrity() const {
  const Node& root = at(kRoot);
  if (!root.live || !root.key.empty() || root.parent != kNone || root.lock_ref != 0 || root.generation != 0) {
    return broken("the root must be live, empty, parentless and unlocked");
  }
  const size_t ps = static_cast<size_t>(page_size_);
  int64_t evictable = 0, protected_tokens = 0;
  int32_t live = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(nodes_.size()); ++id) {
    const Node& n = at(id);
    if (!n.live) continue;
    ++live;
    const std::string name = str("node ", id);
    int64_t child_locks = 0;
    for (const auto& [hash, child] : n.children) {
      if (child <= kRoot || !is_live(child)) return broken(str(name, " has a dead or invalid child ", child));
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
    if (n.lock_ref < 0) return broken(str(name, " has negative lock_ref ", n.lock_ref));
    if (n.last_access > clock_) return broken(str(name, " was used in the future"));
    if (!is_live(n.parent)) return broken(str(name, " has a dead or invalid parent ", n.parent));
    if (find_child(n.parent, {n.key.data(), ps}) != id) return broken(str(name, " is not listed by its parent"));
    (n.lock_ref > 0 ? protected_tokens : evictable) += static_cast<int64_t>(n.key.size());
  }
  if (live != num_live_nodes_) return broken(str(live, " live nodes, counter says ", num_live_nodes_));
  if (static_cast<size_t>(live) + free_ids_.size() != nodes_.size()) return broken("free id list is out of sync");
  for (const int32_t id : free_ids_) {
    if (id <= kRoot || static_cast<size_t>(id) >= nodes_.size() || at(id).live) {
      return broken(str("live or invalid node ", id, " is on the free list"));
    }
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
  if (evictable != evictable_size_ || protected_tokens != protected_size_) {
    return broken(str("sizes: evictable ", evictable_size_, " (nodes say ", evictable, "), protected ",
                      protected_size_, " (nodes say ", protected_tokens, ")"));
  }
  return Status::ok();
}

std::string RadixTreeBase::to_string(const std::string& header,
                                     const std::function<void(int32_t id, std::ostream& os)>& describe) const {
  std::ostringstream os;
  os << header << "\n";
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
      os << "] len=" << n.key.size() << " lock=" << n.lock_ref << " t=" << n.last_access;
      describe(id, os);
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
