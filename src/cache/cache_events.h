// CacheEventObserver: what a prefix cache tells an outside listener about its content, so that the
// listener (the KV-event publisher, server/kv_events.h) can mirror it: which token prefixes became
// cached, which were removed, and when everything went. The cache calls it on the thread that
// changes the cache (the scheduler's) at the moment of the change; an observer must not call back
// into the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rlm {

class CacheEventObserver {
 public:
  virtual ~CacheEventObserver() = default;
  // `path` is the token prefix from the root to the end of a node; the node's own tokens are
  // path[node_begin, path.size()) (a positive multiple of the page size), its parent's path is
  // path[0, node_begin). on_stored: the node was just cached. on_removed: it is about to be removed
  // (eviction). A node split changes nothing that is cached and is not reported.
  virtual void on_stored(std::span<const int32_t> path, size_t node_begin) = 0;
  virtual void on_removed(std::span<const int32_t> path, size_t node_begin) = 0;
  // Everything cached was dropped at once (a reset; /flush_cache evicts, node by node).
  virtual void on_cleared() = 0;
};

}  // namespace rlm
