#include "core/caching_allocator.h"

#include <algorithm>
#include <sstream>

#include "core/check.h"

namespace rlm {

namespace {

std::string mib(size_t bytes) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return os.str();
}

}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<RawAllocator> raw) : raw_(std::move(raw)) {
  RLM_CHECK(raw_ != nullptr) << "CachingAllocator needs a raw allocator";
  pools_[kGeneralPool];
}

CachingAllocator::~CachingAllocator() {
  for (auto& [ptr, block] : blocks_) raw_->raw_free(ptr);
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  const size_t unit = nbytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (nbytes + unit - 1) / unit * unit;
}

void* CachingAllocator::take_cached(Pool& pool, size_t size) {
  auto it = pool.free_blocks.lower_bound(size);
  if (it == pool.free_blocks.end() || it->first > size + size / 4) return nullptr;
  void* p = it->second;
  pool.free_blocks.erase(it);
  return p;
}

void* CachingAllocator::allocate(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t size = round_size(nbytes);
  ++stats_.num_allocs;
  Pool& pool = pools_.at(active_pool_);
  void* p = take_cached(pool, size);
  if (p != nullptr) {
    ++stats_.num_cache_hits;
    Block& b = blocks_.at(p);
    b.in_use = true;
    stats_.cached_bytes -= b.size;
    stats_.allocated_bytes += b.size;
  } else {
    p = raw_->raw_alloc(size);
    if (p == nullptr && active_pool_ == kGeneralPool) {
      release_cached(pools_.at(kGeneralPool));
      p = raw_->raw_alloc(size);
    }
    if (p == nullptr) {
      fail(str("out of device memory allocating ", nbytes, " bytes (", mib(size), " rounded) for ",
               active_pool_ == kGeneralPool ? "the general pool" : "a CUDA-graph pool", "; allocated ",
               mib(stats_.allocated_bytes), ", cached ", mib(stats_.cached_bytes),
               " (lower --mem-fraction-static or --cuda-graph-max-bs)"));
    }
    ++stats_.num_raw_allocs;
    blocks_[p] = Block{size, active_pool_, true};
    pool.bytes += size;
    stats_.allocated_bytes += size;
    stats_.reserved_bytes += size;
    if (active_pool_ != kGeneralPool) stats_.private_pool_bytes += size;
  }
  ++stats_.num_live_blocks;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return p;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(ptr);
  RLM_CHECK(it != blocks_.end()) << "CachingAllocator::free of a pointer it did not allocate";
  Block& b = it->second;
  RLM_CHECK(b.in_use) << "CachingAllocator::free: double free of a " << b.size << "-byte block";
  b.in_use = false;
  stats_.allocated_bytes -= b.size;
  --stats_.num_live_blocks;
  Pool& pool = pools_.at(b.pool);
  if (pool.released) {
    // The pool's graphs are gone: the block goes back to the raw allocator.
    pool.bytes -= b.size;
    stats_.reserved_bytes -= b.size;
    stats_.private_pool_bytes -= b.size;
    ++stats_.num_raw_frees;
    const PoolId id = b.pool;
    raw_->raw_free(ptr);
    blocks_.erase(it);
    if (pool.bytes == 0) pools_.erase(id);
    return;
  }
  pool.free_blocks.emplace(b.size, ptr);
  stats_.cached_bytes += b.size;
}

void CachingAllocator::release_cached(Pool& pool) {
  for (auto& [size, ptr] : pool.free_blocks) {
    const Block b = blocks_.at(ptr);
    pool.bytes -= size;
    stats_.cached_bytes -= size;
    stats_.reserved_bytes -= size;
    if (b.pool != kGeneralPool) stats_.private_pool_bytes -= size;
    ++stats_.num_raw_frees;
    raw_->raw_free(ptr);
    blocks_.erase(ptr);
  }
  pool.free_blocks.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached(pools_.at(kGeneralPool));
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

std::string CachingAllocator::describe() const {
  const AllocatorStats s = stats();
  return str("allocated ", mib(s.allocated_bytes), " in ", s.num_live_blocks, " blocks, cached ",
             mib(s.cached_bytes), ", peak ", mib(s.peak_allocated_bytes), ", CUDA-graph pools ",
             mib(s.private_pool_bytes), ", ", s.num_raw_allocs, " raw allocations for ", s.num_allocs, " requests");
}

CachingAllocator::PoolId CachingAllocator::create_private_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  const PoolId id = next_pool_++;
  pools_[id];
  return id;
}

void CachingAllocator::begin_private_pool(PoolId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  RLM_CHECK(active_pool_ == kGeneralPool) << "private pool " << active_pool_ << " is already active";
  auto it = pools_.find(id);
  RLM_CHECK(id != kGeneralPool && it != pools_.end() && !it->second.released) << "no private pool " << id;
  active_pool_ = id;
}

void CachingAllocator::end_private_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  RLM_CHECK(active_pool_ != kGeneralPool) << "end_private_pool without begin_private_pool";
  active_pool_ = kGeneralPool;
}

CachingAllocator::PoolId CachingAllocator::current_pool() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_pool_;
}

void CachingAllocator::release_private_pool(PoolId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(id);
  RLM_CHECK(id != kGeneralPool && it != pools_.end() && !it->second.released) << "no private pool " << id;
  RLM_CHECK(active_pool_ != id) << "release_private_pool(" << id << ") while it is active";
  release_cached(it->second);
  it->second.released = true;
  if (it->second.bytes == 0) pools_.erase(it);
}

}  // namespace rlm
