// CachingAllocator on a fake raw allocator: size buckets, reuse without raw calls in steady state,
// best fit with bounded slack, OOM retry after releasing the cache, private pools (CUDA-graph
// capture) that never leak blocks into the general pool, and a randomised run against a reference
// model of which block belongs to which pool.
#include "core/caching_allocator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/check.h"

namespace rlm {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Distinct fake addresses (never dereferenced), a byte budget, and a log of live raw blocks.
class FakeRaw : public RawAllocator {
 public:
  struct State {
    std::map<uintptr_t, size_t> live;
    size_t live_bytes = 0;
    size_t capacity = SIZE_MAX;
    int64_t allocs = 0, frees = 0;
  };
  explicit FakeRaw(State* st) : st_(st) {}
  void* raw_alloc(size_t nbytes) override {
    if (st_->live_bytes + nbytes > st_->capacity) return nullptr;
    const uintptr_t p = next_;
    next_ += nbytes + 4096;
    st_->live[p] = nbytes;
    st_->live_bytes += nbytes;
    ++st_->allocs;
    return reinterpret_cast<void*>(p);
  }
  void raw_free(void* ptr) override {
    auto it = st_->live.find(reinterpret_cast<uintptr_t>(ptr));
    RLM_CHECK(it != st_->live.end()) << "raw_free of an unknown block";
    st_->live_bytes -= it->second;
    st_->live.erase(it);
    ++st_->frees;
  }

 private:
  State* st_;
  uintptr_t next_ = 0x10000;
};

struct Fixture {
  FakeRaw::State raw;
  CachingAllocator alloc{std::make_unique<FakeRaw>(&raw)};
};

TEST(CachingAllocator, RoundsToBuckets) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(3 * kMiB), 4 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(4 * kMiB), 4 * kMiB);
}

TEST(CachingAllocator, ReusesFreedBlocksWithoutRawCalls) {
  Fixture f;
  void* a = f.alloc.allocate(1000);
  f.alloc.free(a);
  void* b = f.alloc.allocate(900);  // same 1024-byte bucket
  EXPECT_EQ(a, b);
  EXPECT_EQ(f.raw.allocs, 1);
  void* c = f.alloc.allocate(2000);  // nothing cached fits
  EXPECT_NE(c, b);
  EXPECT_EQ(f.raw.allocs, 2);
  const AllocatorStats s = f.alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024u + 2048u);
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.num_live_blocks, 2);
  f.alloc.free(b);
  f.alloc.free(c);
  EXPECT_EQ(f.alloc.stats().cached_bytes, 1024u + 2048u);
  EXPECT_EQ(f.raw.frees, 0);
}

TEST(CachingAllocator, BestFitWithBoundedSlack) {
  Fixture f;
  void* big = f.alloc.allocate(4 * kMiB);
  f.alloc.free(big);
  void* small = f.alloc.allocate(2 * kMiB);  // 4 MiB > 2 MiB * 5/4: not reused
  EXPECT_NE(small, big);
  void* near = f.alloc.allocate(3 * kMiB + 100);  // rounds to 4 MiB: reused
  EXPECT_EQ(near, big);
  // Best fit: with 8 MiB and 6 MiB blocks cached (the larger one first), a 5 MiB request (6 MiB
  // bucket) takes the 6 MiB block; a second one finds only 8 MiB > 6 MiB * 5/4 and gets a new block.
  void* eight = f.alloc.allocate(8 * kMiB);
  void* six = f.alloc.allocate(6 * kMiB);
  f.alloc.free(eight);
  f.alloc.free(six);
  EXPECT_EQ(f.alloc.allocate(5 * kMiB), six);
  void* fresh = f.alloc.allocate(5 * kMiB);
  EXPECT_NE(fresh, eight);
  EXPECT_EQ(f.alloc.allocate(7 * kMiB), eight);  // 8 MiB bucket
}

TEST(CachingAllocator, SteadyStateStepsMakeNoRawCalls) {
  Fixture f;
  const std::vector<size_t> step = {4096, 123456, 8 * kMiB, 777, 4096, 3 * kMiB + 5, 64};
  std::mt19937 rng(7);
  int64_t raw_after_first = -1;
  for (int s = 0; s < 100; ++s) {
    std::vector<void*> live;
    for (size_t n : step) live.push_back(f.alloc.allocate(n));
    std::shuffle(live.begin(), live.end(), rng);
    for (void* p : live) f.alloc.free(p);
    if (s == 0) raw_after_first = f.raw.allocs;
  }
  EXPECT_EQ(f.raw.allocs, raw_after_first);
  EXPECT_EQ(f.raw.frees, 0);
  const AllocatorStats st = f.alloc.stats();
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.num_live_blocks, 0);
  EXPECT_EQ(st.cached_bytes, f.raw.live_bytes);
  EXPECT_EQ(st.reserved_bytes, f.raw.live_bytes);
  size_t want_peak = 0;
  for (size_t n : step) want_peak += CachingAllocator::round_size(n);
  EXPECT_EQ(st.peak_allocated_bytes, want_peak);
  f.alloc.empty_cache();
  EXPECT_EQ(f.raw.live_bytes, 0u);
  EXPECT_EQ(f.alloc.stats().reserved_bytes, 0u);
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  Fixture f;
  f.raw.capacity = 10 * kMiB;
  void* a = f.alloc.allocate(6 * kMiB);
  f.alloc.free(a);                     // 6 MiB cached
  void* b = f.alloc.allocate(8 * kMiB);  // does not fit next to the cached block: cache released, retried
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(f.raw.frees, 1);
  EXPECT_EQ(f.alloc.stats().cached_bytes, 0u);
  try {
    (void)f.alloc.allocate(4 * kMiB);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory allocating 4194304 bytes"), std::string::npos)
        << e.what();
  }
  f.alloc.free(b);
}

TEST(CachingAllocator, BadFreesAreErrors) {
  Fixture f;
  void* a = f.alloc.allocate(100);
  f.alloc.free(a);
  EXPECT_THROW(f.alloc.free(a), Error);
  int x = 0;
  EXPECT_THROW(f.alloc.free(&x), Error);
  f.alloc.free(nullptr);  // a no-op, like free(nullptr)
}

TEST(CachingAllocator, PrivatePoolBlocksNeverReachTheGeneralPool) {
  Fixture f;
  void* general = f.alloc.allocate(4096);
  f.alloc.free(general);  // cached in the general pool
  const auto pool = f.alloc.create_private_pool();
  f.alloc.begin_private_pool(pool);
  EXPECT_EQ(f.alloc.current_pool(), pool);
  void* g1 = f.alloc.allocate(4096);  // not the general cached block
  EXPECT_NE(g1, general);
  void* g2 = f.alloc.allocate(4096);
  f.alloc.free(g1);  // back to the private pool, reusable within the capture
  EXPECT_EQ(f.alloc.allocate(4096), g1);
  f.alloc.free(g1);
  f.alloc.end_private_pool();
  EXPECT_EQ(f.alloc.current_pool(), CachingAllocator::kGeneralPool);
  // Eager allocations after the capture never get graph memory.
  void* e1 = f.alloc.allocate(4096);
  void* e2 = f.alloc.allocate(4096);
  EXPECT_EQ(e1, general);
  EXPECT_NE(e2, g1);
  EXPECT_NE(e2, g2);
  // A block of the pool freed after the capture returns to the pool, not the general cache.
  f.alloc.free(g2);
  f.alloc.free(e1);
  f.alloc.free(e2);
  void* e3 = f.alloc.allocate(4096);
  void* e4 = f.alloc.allocate(4096);
  EXPECT_TRUE((e3 == e1 || e3 == e2) && (e4 == e1 || e4 == e2) && e3 != e4);
  // The next capture sharing the pool reuses its blocks.
  f.alloc.begin_private_pool(pool);
  void* c1 = f.alloc.allocate(4096);
  void* c2 = f.alloc.allocate(4096);
  EXPECT_TRUE((c1 == g1 || c1 == g2) && (c2 == g1 || c2 == g2) && c1 != c2);
  EXPECT_THROW(f.alloc.begin_private_pool(pool), Error);  // one at a time
  f.alloc.end_private_pool();
  EXPECT_EQ(f.alloc.stats().private_pool_bytes, 2 * 4096u);
  // Releasing the pool: its cached blocks go back at once, the ones in use when they are freed.
  f.alloc.free(c1);
  const int64_t frees_before = f.raw.frees;
  f.alloc.release_private_pool(pool);
  EXPECT_EQ(f.raw.frees, frees_before + 1);
  f.alloc.free(c2);
  EXPECT_EQ(f.raw.frees, frees_before + 2);
  EXPECT_EQ(f.alloc.stats().private_pool_bytes, 0u);
  EXPECT_THROW(f.alloc.begin_private_pool(pool), Error);
  f.alloc.free(e3);
  f.alloc.free(e4);
}

TEST(CachingAllocator, OutOfMemoryInsideACaptureKeepsTheGeneralCache) {
  Fixture f;
  f.raw.capacity = 8 * kMiB;
  void* a = f.alloc.allocate(6 * kMiB);
  f.alloc.free(a);
  const auto pool = f.alloc.create_private_pool();
  f.alloc.begin_private_pool(pool);
  EXPECT_THROW((void)f.alloc.allocate(4 * kMiB), Error);  // releasing would sync inside the capture
  f.alloc.end_private_pool();
  EXPECT_EQ(f.raw.frees, 0);
  EXPECT_EQ(f.alloc.allocate(6 * kMiB), a);
}

// Random allocate/free with captures interleaved, checked against a reference of which pool owns
// each block: a pointer first handed out inside pool P is only ever handed out inside P again, no
// pointer is live twice, and the byte counts match the live set and the raw allocator.
TEST(CachingAllocator, RandomisedAgainstReference) {
  Fixture f;
  std::mt19937 rng(12345);
  const auto pool_a = f.alloc.create_private_pool();
  const auto pool_b = f.alloc.create_private_pool();
  std::map<void*, CachingAllocator::PoolId> owner;
  std::map<void*, size_t> live;  // pointer -> rounded size
  std::uniform_int_distribution<int> op(0, 99);
  std::uniform_int_distribution<size_t> small(1, 300000), large(kMiB, 12 * kMiB);
  for (int i = 0; i < 20000; ++i) {
    const int o = op(rng);
    if (o < 3) {
      if (f.alloc.current_pool() == CachingAllocator::kGeneralPool) {
        f.alloc.begin_private_pool(o == 0 ? pool_a : pool_b);
      } else {
        f.alloc.end_private_pool();
      }
    } else if (o < 55 || live.empty()) {
      const size_t n = op(rng) < 80 ? small(rng) : large(rng);
      void* p = f.alloc.allocate(n);
      ASSERT_EQ(live.count(p), 0u) << "pointer handed out twice";
      const auto pool = f.alloc.current_pool();
      auto [it, fresh] = owner.emplace(p, pool);
      ASSERT_EQ(it->second, pool) << "a block moved between pools at step " << i;
      live[p] = CachingAllocator::round_size(n);
      ASSERT_GE(live[p], n);
    } else {
      auto it = live.begin();
      std::advance(it, std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
      f.alloc.free(it->first);
      live.erase(it);
    }
    if (i % 500 == 0) {
      size_t sum = 0;
      for (auto& [p, n] : live) sum += n;
      const AllocatorStats s = f.alloc.stats();
      ASSERT_EQ(s.num_live_blocks, static_cast<int64_t>(live.size()));
      ASSERT_GE(s.allocated_bytes, sum);  // a reused block may be up to 5/4 of the bucket
      ASSERT_LE(s.allocated_bytes, sum + sum / 4);
      ASSERT_EQ(s.reserved_bytes, f.raw.live_bytes);
      ASSERT_EQ(s.allocated_bytes + s.cached_bytes, s.reserved_bytes);
    }
  }
  if (f.alloc.current_pool() != CachingAllocator::kGeneralPool) f.alloc.end_private_pool();
  for (auto& [p, n] : live) f.alloc.free(p);
  f.alloc.release_private_pool(pool_a);
  f.alloc.release_private_pool(pool_b);
  f.alloc.empty_cache();
  EXPECT_EQ(f.raw.live_bytes, 0u);
  EXPECT_EQ(f.raw.allocs, f.raw.frees);
}

}  // namespace
}  // namespace rlm
