// CachingAllocator: a size-bucketed cache of device memory blocks on top of a raw allocator
// (cudaMalloc/cudaFree on CUDA; a fake in the unit tests). Freed blocks go back to a free list and
// are handed out again instead of being returned to the driver, so steady-state steps make no
// cudaMalloc/cudaFree calls (cudaFree synchronises the whole device).
//
// Stream order: radixlm runs every CUDA op of a device on one stream, so a block freed on the host
// while kernels that use it are still queued can be reused at once — the next user's work is
// queued behind them. (A second stream would need events; there is none.)
//
// Private pools (CUDA-graph capture): between begin_private_pool(id) and end_private_pool(), every
// allocation comes from pool `id` (its free list first, then the raw allocator), and blocks of a
// private pool always return to that pool, never to the general one — also when freed after the
// capture ended. A captured graph's replay therefore never writes memory that a live tensor of the
// eager path owns. Graphs captured one after the other may share a pool (they replay one at a
// time on the same stream). release_private_pool(id) hands the pool's free blocks back to the raw
// allocator once its graphs are destroyed; blocks still in use are raw-freed when they are freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace rlm {

// Where the cache gets memory from.
class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // nbytes > 0; nullptr when out of memory (any other failure throws).
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr) = 0;
};

struct AllocatorStats {
  size_t allocated_bytes = 0;       // blocks handed out now (rounded sizes)
  size_t cached_bytes = 0;          // free blocks kept for reuse (general and private pools)
  size_t reserved_bytes = 0;        // allocated + cached: what the raw allocator holds for us
  size_t peak_allocated_bytes = 0;  // since creation or reset_peak()
  size_t private_pool_bytes = 0;    // blocks owned by private pools (in use or free)
  int64_t num_allocs = 0;           // allocate() calls
  int64_t num_cache_hits = 0;       // allocate() calls served from a free list
  int64_t num_raw_allocs = 0;       // successful raw_alloc calls
  int64_t num_raw_frees = 0;        // raw_free calls
  int64_t num_live_blocks = 0;      // blocks handed out now
};

class CachingAllocator {
 public:
  using PoolId = int64_t;
  static constexpr PoolId kGeneralPool = 0;

  // Sizes up to kSmallLimit round up to multiples of kSmallRound, larger ones to kLargeRound.
  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  explicit CachingAllocator(std::unique_ptr<RawAllocator> raw);
  // Returns every block it still holds (cached or not) to the raw allocator.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The bucket size for a request of nbytes (0 counts as 1).
  static size_t round_size(size_t nbytes);

  // A block of at least nbytes: a cached block of the current pool whose size is in
  // [round_size(nbytes), round_size(nbytes) * 5 / 4] (best fit), else a new raw block. When the
  // raw allocator is out of memory, the general pool's cache is released and the call retried
  // once (not while a private pool is active: that would synchronise inside a capture); then it
  // throws rlm::Error naming the request and the stats.
  void* allocate(size_t nbytes);
  // Returns a block from allocate() to its pool's free list. Unknown pointers are an error.
  void free(void* ptr);
  // Hands the general pool's free blocks back to the raw allocator.
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peak();
  // "allocated 1.2 MiB, cached 3.0 MiB, ..." for error messages and logs.
  std::string describe() const;

  // A new private pool id (> 0).
  PoolId create_private_pool();
  // Routes allocations to pool `id` until end_private_pool(). One at a time.
  void begin_private_pool(PoolId id);
  void end_private_pool();
  // The pool allocations go to now (kGeneralPool outside a capture).
  PoolId current_pool() const;
  // Frees pool `id`'s cached blocks; its blocks in use are raw-freed when freed. The id is dead.
  void release_private_pool(PoolId id);

 private:
  struct Block {
    size_t size = 0;
    PoolId pool = kGeneralPool;
    bool in_use = false;
  };
  struct Pool {
    std::multimap<size_t, void*> free_blocks;  // size -> block
    size_t bytes = 0;                          // all blocks of the pool (in use or free)
    bool released = false;
  };

  void* take_cached(Pool& pool, size_t size);
  void release_cached(Pool& pool);

  mutable std::mutex mutex_;
  std::unique_ptr<RawAllocator> raw_;
  std::unordered_map<void*, Block> blocks_;  // every block we own, in use or cached
  std::map<PoolId, Pool> pools_;
  PoolId active_pool_ = kGeneralPool;
  PoolId next_pool_ = 1;
  AllocatorStats stats_;
};

}  // namespace rlm
