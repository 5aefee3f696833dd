#include "cache/hybrid_radix_cache.h"

#include <numeric>
#include <ostream>
#include <unordered_set>
#include <utility>

#include "core/check.h"

namespace rlm {

HybridRadixCache::HybridRadixCache(int32_t page_size, int32_t chunk, MambaSlotRelease release)
    : tree_(page_size, "HybridRadixCache"), align_(0), release_(std::move(release)) {
  RLM_CHECK_GE(chunk, 1) << "HybridRadixCache snapshot chunk size";
  RLM_CHECK(release_ != nullptr) << "HybridRadixCache needs a callback that frees snapshot slots";
  align_ = std::lcm(page_size, chunk);
}

MatchResult HybridRadixCache::match_prefix(std::span<const int32_t> tokens) {
  MatchResult result = kv_tree::match(tree_, tokens);
  // The resume point: the deepest node on the path with a snapshot.
  int32_t depth = result.handle.length;
  for (int32_t n = result.handle.node; n != RadixTreeBase::kRoot; n = tree_.parent(n)) {
    Payload& p = tree_.payload(n);
    if (p.mamba >= 0) {
      p.mamba_access = tree_.clock();  // the match's tick
      result.mamba_handle = tree_.handle_of(n, depth);
      result.mamba_slot = p.mamba;
      break;
    }
    depth -= static_cast<int32_t>(tree_.key(n).size());
  }
  return result;
}

InsertResult HybridRadixCache::insert_with_snapshot(std::span<const int32_t> tokens,
                                                    std::span<const int32_t> slots, int32_t mamba_slot) {
  if (mamba_slot >= 0) {
    RLM_CHECK(!tokens.empty() && tokens.size() % static_cast<size_t>(align_) == 0)
        << "HybridRadixCache::insert: a snapshot after " << tokens.size()
        << " tokens is not at a positive multiple of the snapshot alignment " << align_;
  }
  InsertResult r = kv_tree::insert(tree_, tokens, slots);
  if (mamba_slot < 0) return r;
  // The snapshot goes to the node that ends at the (aligned) end unless it already has one.
  Payload& end = tree_.payload(r.handle.node);
  if (end.mamba < 0) {
    end.mamba = mamba_slot;
    ++num_snapshots_;
    r.mamba_taken = true;
  }
  end.mamba_access = tree_.clock();  // the insert's tick
  return r;
}

void HybridRadixCache::drop_snapshot(int32_t id) {
  Payload& p = tree_.payload(id);
  if (p.mamba < 0) return;
  const int32_t slot = p.mamba;
  p.mamba = -1;
  --num_snapshots_;
  release_(slot);
}

void HybridRadixCache::release_node(int32_t id, std::vector<int32_t>& freed) {
  drop_snapshot(id);
  kv_tree::append_slots(tree_.payload(id), freed);
}

std::vector<int32_t> HybridRadixCache::evict(int64_t num_tokens) {
  std::vector<int32_t> freed;
  tree_.evict_lru(num_tokens, [&](int32_t id) { release_node(id, freed); });
  return freed;
}

std::vector<int32_t> HybridRadixCache::evict_mamba(int64_t num_snapshots) {
  std::vector<int32_t> freed;
  if (num_snapshots <= 0) return freed;
  LruQueue queue;
  queue.reserve(static_cast<size_t>(num_snapshots_));
  tree_.for_each_node([&](int32_t id) {
    const Payload& p = tree_.payload(id);
    if (p.mamba >= 0) queue.push(p.mamba_access, id);
  });
  // Only leaves holding a snapshot are freed here (each popped once) and no node is created, so
  // every id still in the queue names a live node.
  int64_t dropped = 0;
  while (dropped < num_snapshots && !queue.empty()) {
    const int32_t id = queue.pop();
    if (tree_.is_leaf(id) && tree_.lock_ref(id) == 0) {
      release_node(id, freed);  // a leaf without its state is dead weight: the KV goes too
      tree_.remove_leaf(id);
    } else {
      drop_snapshot(id);  // tombstone: the KV stays for requests that resume deeper
    }
    ++dropped;
  }
  return freed;
}

std::vector<int32_t> HybridRadixCache::reset() {
  std::vector<int32_t> freed;
  freed.reserve(static_cast<size_t>(tree_.evictable_size()));
  tree_.clear([&](int32_t id) { release_node(id, freed); }, "reset");
  return freed;
}

Status HybridRadixCache::check_integrity() const {
  RLM_RETURN_IF_ERROR(tree_.check_integrity());
  RLM_RETURN_IF_ERROR(kv_tree::check(tree_));
  if (tree_.payload(RadixTreeBase::kRoot).mamba >= 0) return tree_.broken("the root holds a snapshot");
  std::unordered_set<int32_t> snapshots;
  Status status;
  tree_.for_each_node([&](int32_t id) {
    const Payload& p = tree_.payload(id);
    if (!status.is_ok() || p.mamba < 0) return;
    const int32_t depth = tree_.depth(id);
    if (depth % align_ != 0) {
      status = tree_.broken(str("node ", id, " has a snapshot at depth ", depth, ", not a multiple of ", align_));
    } else if (!snapshots.insert(p.mamba).second) {
      status = tree_.broken(str("snapshot slot ", p.mamba, " is cached twice"));
    } else if (p.mamba_access > tree_.clock()) {
      status = tree_.broken(str("node ", id, "'s snapshot was used in the future"));
    }
  });
  RLM_RETURN_IF_ERROR(status);
  if (static_cast<int64_t>(snapshots.size()) != num_snapshots_) {
    return tree_.broken(str(snapshots.size(), " snapshots in nodes, counter says ", num_snapshots_));
  }
  return Status::ok();
}

std::string HybridRadixCache::to_string() const {
  const std::string header =
      str("HybridRadixCache(page_size=", tree_.page_size(), ", nodes=", tree_.num_nodes(),
          ", evictable=", tree_.evictable_size(), ", protected=", tree_.protected_size(),
          ", snapshots=", num_snapshots_, ", align=", align_, ", clock=", tree_.clock(), ")");
  return tree_.to_string(header, [this](int32_t id, std::ostream& os) {
    const Payload& p = tree_.payload(id);
    kv_tree::describe(p, os);
    if (p.mamba >= 0) {
      os << " mamba=" << p.mamba << " mt=" << p.mamba_access;
    } else {
      os << " tombstone";
    }
  });
}

}  // namespace rlm
