// HybridRadixCache: the design's worked examples (resume points, tombstones), separate
// eviction, misuse errors, then a randomized scheduler-like workload checked after every
// operation against a brute-force model of the rules (every cached page keyed by its whole token
// prefix; every snapshot keyed by the prefix it is the state of).
#include "cache/hybrid_radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/mamba_pool.h"
#include "cache/page_allocator.h"
#include "core/check.h"
#include "radix_test_util.h"

namespace rlm {
namespace {

using radix_test::head;
using radix_test::iota_vec;
using radix_test::Request;
using radix_test::Vec;

// Snapshot slots as a MambaPool hands them out: alloc / free with double-free detection.
class SlotPool {
 public:
  explicit SlotPool(int32_t n) : used_(static_cast<size_t>(n), false) {
    for (int32_t i = n - 1; i >= 0; --i) free_.push_back(i);
  }
  int32_t alloc() {
    if (free_.empty()) return -1;
    const int32_t s = free_.back();
    free_.pop_back();
    used_[static_cast<size_t>(s)] = true;
    return s;
  }
  void free(int32_t s) {
    ASSERT_TRUE(s >= 0 && static_cast<size_t>(s) < used_.size() && used_[static_cast<size_t>(s)])
        << "snapshot slot " << s << " freed twice or never allocated";
    used_[static_cast<size_t>(s)] = false;
    free_.push_back(s);
  }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_total() const { return static_cast<int32_t>(used_.size()); }

 private:
  std::vector<bool> used_;
  Vec free_;
};

// A cache whose released snapshot slots are recorded and go back to a SlotPool.
struct Fixture {
  Fixture(int32_t page_size, int32_t chunk, int32_t slots = 64)
      : pool(slots), cache(page_size, chunk, [this](int32_t s) {
          released.push_back(s);
          pool.free(s);
        }) {}
  void expect_ok() const { radix_test::expect_ok(cache); }
  SlotPool pool;
  Vec released;
  HybridRadixCache cache;
};

// A 150-token KV match whose deepest snapshot is at 96 resumes at 96 (chunk 32 here, so that 96
// is a chunk boundary).
TEST(HybridRadixCache, ResumesAtTheDeepestSnapshotOfTheKvMatch) {
  Fixture f(1, 32);
  const Vec tokens = iota_vec(200, 0);
  const int32_t s96 = f.pool.alloc();
  EXPECT_TRUE(f.cache.insert_with_snapshot(head(tokens, 96), iota_vec(96, 1000), s96).mamba_taken);
  f.cache.insert(head(tokens, 150), iota_vec(150, 1000));  // KV only: [96, 150) is a tombstone
  f.expect_ok();
  const MatchResult m = f.cache.match_prefix(head(tokens, 170));
  EXPECT_EQ(m.length(), 150);
  EXPECT_EQ(m.slots, iota_vec(150, 1000));
  EXPECT_EQ(m.mamba_len(), 96);
  EXPECT_EQ(m.mamba_slot, s96);
  EXPECT_EQ(f.cache.mamba_size(), 1);
  // The same with the FLA chunk of 64: the state at 64 is the deepest; KV reaches 150.
  Fixture g(1, 64);
  const int32_t s64 = g.pool.alloc();
  g.cache.insert_with_snapshot(head(tokens, 64), iota_vec(64, 0), s64);
  g.cache.insert(head(tokens, 150), iota_vec(150, 0));
  const MatchResult m2 = g.cache.match_prefix(tokens);
  EXPECT_EQ(m2.length(), 150);
  EXPECT_EQ(m2.mamba_len(), 64);
  EXPECT_EQ(m2.mamba_slot, s64);
  g.expect_ok();
}

// A prompt shorter than one chunk has no chunk boundary, so it has no snapshot: its KV
// can be cached, but a hybrid request matching it resumes at 0; a snapshot at a position that is
// not a chunk (or page) boundary is refused.
TEST(HybridRadixCache, ShorterThanAChunkHasNoSnapshot) {
  Fixture f(1, 64);
  const Vec prompt = iota_vec(50, 7);
  const int32_t s = f.pool.alloc();
  EXPECT_THROW(f.cache.insert_with_snapshot(prompt, iota_vec(50, 0), s), Error);
  f.cache.insert(prompt, iota_vec(50, 0));
  const MatchResult m = f.cache.match_prefix(prompt);
  EXPECT_EQ(m.length(), 50);
  EXPECT_EQ(m.mamba_len(), 0);
  EXPECT_EQ(m.mamba_slot, -1);
  EXPECT_EQ(m.mamba_handle, CacheHandle{});
  Fixture paged(16, 24);  // snapshots at multiples of lcm(16, 24) = 48
  EXPECT_EQ(paged.cache.mamba_align(), 48);
  EXPECT_THROW(paged.cache.insert_with_snapshot(iota_vec(24, 0), iota_vec(24, 0), 0), Error);
  EXPECT_TRUE(
      paged.cache.insert_with_snapshot(iota_vec(48, 0), iota_vec(48, 0), paged.pool.alloc()).mamba_taken);
  f.expect_ok();
  paged.expect_ok();
}

// Two requests share a prefix and fork; when the shared part has no snapshot (it was
// only ever a split point, or its snapshot was evicted), a request that matches into it falls
// back to the root.
TEST(HybridRadixCache, TombstonedPathFallsBackToTheRoot) {
  Fixture f(1, 64);
  Vec a = iota_vec(192, 0), b = iota_vec(192, 0);
  for (int32_t i = 128; i < 192; ++i) b[static_cast<size_t>(i)] = 1000 + i;
  const int32_t sa = f.pool.alloc(), sb = f.pool.alloc();
  f.cache.insert_with_snapshot(a, iota_vec(192, 0), sa);
  const InsertResult rb = f.cache.insert_with_snapshot(b, iota_vec(192, 500), sb);
  EXPECT_EQ(rb.prefix_len, 128);
  EXPECT_TRUE(rb.mamba_taken);
  f.expect_ok();
  // [0, 128) is the split-off upper node: KV without state.
  MatchResult m = f.cache.match_prefix(head(a, 150));
  EXPECT_EQ(m.length(), 150);
  EXPECT_EQ(m.mamba_len(), 0);
  // A third request snapshots 128 (the branching point); now resuming there works.
  const int32_t s128 = f.pool.alloc();
  EXPECT_TRUE(f.cache.insert_with_snapshot(head(a, 128), iota_vec(128, 900), s128).mamba_taken);
  EXPECT_EQ(f.cache.match_prefix(head(a, 150)).mamba_len(), 128);
  // Lock a's full path (a running request), then evict every snapshot (oldest first: sb, s128,
  // then sa, which the match just refreshed).
  const MatchResult full = f.cache.match_prefix(a);
  EXPECT_EQ(full.mamba_len(), 192);
  f.cache.lock(full.handle);
  const Vec freed = f.cache.evict_mamba(3);
  // b's leaf is unlocked: it went whole (its 64 KV slots); a's leaf is locked and [0, 128) is
  // internal: both became tombstones and kept their KV.
  EXPECT_EQ(freed, iota_vec(64, 628));
  EXPECT_EQ(f.cache.mamba_size(), 0);
  EXPECT_EQ(std::set<int32_t>(f.released.begin(), f.released.end()), (std::set<int32_t>{sa, sb, s128}));
  EXPECT_EQ(f.cache.total_size(), 192);
  m = f.cache.match_prefix(head(a, 150));
  EXPECT_EQ(m.length(), 150);
  EXPECT_EQ(m.mamba_len(), 0);
  EXPECT_EQ(m.mamba_slot, -1);
  f.cache.unlock(full.handle);
  f.expect_ok();
}

// evict_mamba goes by the snapshots' own LRU, which only a store or a resume refreshes; KV eviction
// takes a leaf's snapshot with it.
TEST(HybridRadixCache, SnapshotAndKvEvictionAreSeparate) {
  Fixture f(4, 8);
  const Vec t = iota_vec(32, 0);
  const int32_t s8 = f.pool.alloc(), s16 = f.pool.alloc(), s32 = f.pool.alloc();
  f.cache.insert_with_snapshot(head(t, 8), iota_vec(8, 0), s8);
  f.cache.insert_with_snapshot(head(t, 16), iota_vec(16, 0), s16);
  f.cache.insert_with_snapshot(t, iota_vec(32, 0), s32);
  // Resuming at 8 refreshes s8 only (a match reaching 16 would resume at 16, not 8).
  EXPECT_EQ(f.cache.match_prefix(head(t, 12)).mamba_slot, s8);
  EXPECT_TRUE(f.cache.evict_mamba(1).empty());  // s16, internal: a tombstone, KV stays
  EXPECT_EQ(f.released, (Vec{s16}));
  EXPECT_EQ(f.cache.total_size(), 32);
  EXPECT_EQ(f.cache.match_prefix(head(t, 20)).mamba_len(), 8);
  f.expect_ok();
  // KV eviction of the leaf [20, 32) frees s32 too, then its parent [16, 20); [12, 16), now a
  // tombstone leaf, goes next.
  Vec kv = f.cache.evict(16);
  std::sort(kv.begin(), kv.end());
  EXPECT_EQ(kv, iota_vec(16, 16));
  EXPECT_EQ(f.released, (Vec{s16, s32}));
  EXPECT_EQ(f.cache.mamba_size(), 1);
  EXPECT_EQ(f.cache.evict(1), iota_vec(4, 12));
  EXPECT_EQ(f.cache.match_prefix(t).mamba_slot, s8);
  EXPECT_EQ(f.cache.reset(), iota_vec(12, 0));
  EXPECT_EQ(f.released, (Vec{s16, s32, s8}));
  EXPECT_EQ(f.pool.num_free(), f.pool.num_total());
  f.expect_ok();
}

TEST(HybridRadixCache, DuplicateSnapshotIsNotTakenAndSplitsKeepTheDeepOne) {
  Fixture f(1, 4);
  const Vec t = iota_vec(12, 0);
  const int32_t s1 = f.pool.alloc(), s2 = f.pool.alloc();
  const InsertResult r1 = f.cache.insert_with_snapshot(t, iota_vec(12, 0), s1);
  EXPECT_TRUE(r1.mamba_taken);
  const InsertResult r2 = f.cache.insert_with_snapshot(t, iota_vec(12, 50), s2);
  EXPECT_FALSE(r2.mamba_taken);  // stays the caller's
  EXPECT_EQ(r2.prefix_len, 12);
  // A split at 4 (another branch) leaves the snapshot with the lower node: the handle still works.
  Vec other = head(t, 4);
  other.insert(other.end(), {90, 91, 92, 93});
  f.cache.insert(other, iota_vec(8, 100));
  f.cache.lock(r1.handle);
  const MatchResult m = f.cache.match_prefix(t);
  EXPECT_EQ(m.mamba_handle, r1.handle);
  EXPECT_EQ(m.mamba_slot, s1);
  f.cache.unlock(r1.handle);
  f.expect_ok();
  EXPECT_THROW(f.cache.insert_with_snapshot(t, iota_vec(11, 0), -1), Error);
  EXPECT_THROW(HybridRadixCache(1, 0, [](int32_t) {}), Error);
  EXPECT_THROW(HybridRadixCache(1, 4, nullptr), Error);
}

// Copy-on-write with a real MambaPool, driven the way the scheduler drives it: a request copies the
// matched snapshot into its own working slot and runs on; the cached state never changes, and the
// request's deeper snapshot goes into a slot of its own.
TEST(HybridRadixCache, ResumingCopiesTheSnapshotAndNeverWritesIt) {
  const MambaShape shape{.num_layers = 2, .conv_dim = 3, .conv_width = 2, .num_v_heads = 1, .head_k_dim = 2, .head_v_dim = 2};
  MambaPool pool(shape, 4);
  HybridRadixCache cache(1, 4, [&pool](int32_t s) { pool.free(s); });
  auto fill = [&](int32_t slot, float v) {
    for (int64_t l = 0; l < shape.num_layers; ++l) {
      for (const Tensor& t : {pool.conv_state(l).select(0, slot), pool.ssm_state(l).select(0, slot)}) {
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v + static_cast<float>(i);
      }
    }
  };
  auto same = [&](int32_t a, int32_t b) {
    for (int64_t l = 0; l < shape.num_layers; ++l) {
      for (const auto* states : {&pool.conv_state(l), &pool.ssm_state(l)}) {
        const Tensor x = states->select(0, a), y = states->select(0, b);
        if (!std::equal(x.data<float>(), x.data<float>() + x.numel(), y.data<float>())) return false;
      }
    }
    return true;
  };
  const Vec t = iota_vec(12, 0);
  const int32_t snap = pool.alloc(), reference = pool.alloc();
  fill(snap, 1.0f);
  pool.copy_slot(snap, reference);
  ASSERT_TRUE(cache.insert_with_snapshot(head(t, 8), iota_vec(8, 0), snap).mamba_taken);
  // A request resumes at 8: its working slot gets a copy, then its own steps overwrite it.
  const MatchResult m = cache.match_prefix(t);
  ASSERT_EQ(m.mamba_slot, snap);
  const int32_t working = pool.alloc();
  pool.copy_slot(m.mamba_slot, working);
  EXPECT_TRUE(same(working, snap));
  fill(working, 50.0f);
  EXPECT_TRUE(same(snap, reference)) << "the cached snapshot changed";
  // Its snapshot at 12 is a different slot; the one at 8 is still what was cached.
  const int32_t track = pool.alloc();
  pool.copy_slot(working, track);
  EXPECT_TRUE(cache.insert_with_snapshot(t, iota_vec(12, 0), track).mamba_taken);
  EXPECT_EQ(cache.match_prefix(head(t, 11)).mamba_slot, snap);
  EXPECT_EQ(cache.match_prefix(t).mamba_slot, track);
  EXPECT_TRUE(same(snap, reference));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(cache.reset().size(), 12u);
  pool.free(working);
  pool.free(reference);
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(HybridRadixCache, FactoryMakesItForHybridModelsOnly) {
  auto hybrid = make_prefix_cache("radix", 16, 64, [](int32_t) {});
  ASSERT_TRUE(hybrid.is_ok());
  EXPECT_NE(dynamic_cast<HybridRadixCache*>(hybrid->get()), nullptr);
  EXPECT_EQ((*hybrid)->mamba_align(), 64);
  auto naive = make_prefix_cache("naive", 16, 64, [](int32_t) {});
  ASSERT_TRUE(naive.is_ok());
  EXPECT_EQ((*naive)->mamba_align(), 0);
  EXPECT_EQ(make_prefix_cache("radix", 16, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_prefix_cache("radix", 16, 64).status().code(), StatusCode::kInvalidArgument);  // no callback
  auto plain = make_prefix_cache("radix", 16);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(dynamic_cast<HybridRadixCache*>(plain->get()), nullptr);
}

// The ownership contract of prefix_cache.h, driven through the interface with KV-only inserts (every
// node a tombstone), returns every page as it does for the other caches.
TEST(HybridRadixCache, HonoursTheOwnershipContract) {
  for (const int32_t ps : {1, 4}) {
    const uint32_t seed = radix_test::base_seed(2026u);
    SCOPED_TRACE("page_size " + std::to_string(ps) + ", seed " + std::to_string(seed));
    auto cache = make_prefix_cache("radix", ps, 8, [](int32_t) { FAIL() << "released a snapshot it never had"; });
    ASSERT_TRUE(cache.is_ok());
    ASSERT_NE(dynamic_cast<HybridRadixCache*>(cache->get()), nullptr);
    radix_test::run_contract_flow(**cache, seed, 2000);
    if (HasFailure()) return;
  }
}

// ---- randomized workload against a brute-force model -------------------------------------------

// The brute force of radix_test_util.h (every cached page keyed by the whole token prefix that ends
// with it, with its slots, KV last-use tick and lock count) plus every snapshot keyed by its prefix,
// with its slot and its own last-use tick. The rules: a match's KV length is the longest cached page
// prefix, its resume point the longest prefix of that with a snapshot; a match stamps the KV path
// and the resume snapshot; an insert stamps the path and its snapshot (stored only where none is).
class Reference : public radix_test::ReferencePages {
 public:
  struct Snap {
    int32_t slot = -1;
    uint64_t last_access = 0;
  };
  struct Match {
    int32_t kv_len = 0;
    int32_t mamba_len = 0;
    int32_t mamba_slot = -1;
  };

  using ReferencePages::ReferencePages;

  Match match(const Vec& t) {
    Match m;
    m.kv_len = ReferencePages::match(t);
    for (int32_t j = m.kv_len; j > 0; j -= page_size()) {
      auto it = snaps.find(head(t, j));
      if (it == snaps.end()) continue;
      it->second.last_access = clock();
      m.mamba_len = j;
      m.mamba_slot = it->second.slot;
      break;
    }
    return m;
  }
  // Returns (already-cached length, snapshot taken).
  std::pair<int32_t, bool> insert(const Vec& t, const Vec& s, int32_t snapshot) {
    const int32_t k = ReferencePages::insert(t, s);
    const int32_t aligned = static_cast<int32_t>(t.size()) / page_size() * page_size();
    bool taken = false;
    if (snapshot >= 0) {
      auto [it, fresh] = snaps.try_emplace(head(t, aligned), Snap{snapshot, clock()});
      it->second.last_access = clock();
      taken = fresh;
    }
    return {k, taken};
  }

  std::map<Vec, Snap> snaps;
};

// The cache (with its snapshot pool) and its reference, declared before WorkloadBase so that they
// outlive it.
struct HybridState {
  HybridState(int32_t page_size, int32_t chunk, int32_t num_snapshots)
      : fx_(page_size, chunk, num_snapshots), reference_(page_size) {}
  Fixture fx_;
  Reference reference_;
};

// A request as the hybrid scheduler keeps it (radix_test::Request): it resumed at cached_len (a
// snapshot, or 0), slots [0, cached_len) are the cache's through handle, the rest are whole pages of
// its own; a snapshot it offers the cache and that is not taken goes back to the pool.
class Workload : private HybridState, public radix_test::WorkloadBase {
 public:
  Workload(int32_t page_size, int32_t chunk, int32_t num_slots, int32_t num_snapshots, uint32_t seed)
      : HybridState(page_size, chunk, num_snapshots),
        WorkloadBase(fx_.cache, reference_, page_size, num_slots, seed),
        align_(std::lcm(page_size, chunk)),
        max_len_(5 * std::lcm(page_size, chunk) + 3) {}

  void run(int num_ops) {
    if (!run_ops(num_ops)) return;
    checked_evict_mamba(fx_.cache.mamba_size() / 2);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    evict_everything();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(fx_.cache.mamba_size(), 0);
    ASSERT_TRUE(reference_.snaps.empty());
    ASSERT_EQ(fx_.cache.num_nodes(), 1);
    ASSERT_EQ(fx_.pool.num_free(), fx_.pool.num_total());
    EXPECT_GT(resumed_tokens_, 0);
    EXPECT_GT(tombstone_hits_, 0) << "no match ever resumed short of its KV match";
    EXPECT_GT(mamba_tombstoned_, 0);
    EXPECT_GT(mamba_leaf_evicted_, 0);
    EXPECT_GT(duplicate_snapshots_, 0);
    if (std::getenv("RADIXLM_TEST_VERBOSE") != nullptr) {
      std::printf("page %d align %d: resumed %lld, tombstone hits %lld, tombstoned %lld, leaf-evicted %lld\n",
                  ps_, align_, static_cast<long long>(resumed_tokens_), static_cast<long long>(tombstone_hits_),
                  static_cast<long long>(mamba_tombstoned_), static_cast<long long>(mamba_leaf_evicted_));
    }
  }

 private:
  void step(uint32_t op) override {
    if (op < 22)
      resumed_tokens_ += admit();
    else if (op < 34)
      extend(static_cast<uint32_t>(align_), 2 * static_cast<size_t>(max_len_));
    else if (op < 48)
      cache_request(/*finish=*/false);
    else if (op < 62)
      cache_request(/*finish=*/true);
    else if (op < 67)
      abort_request();
    else if (op < 85)
      probe();
    else if (op < 94)
      checked_evict(1 + static_cast<int64_t>(rng_() % static_cast<uint32_t>(3 * align_)));
    else
      checked_evict_mamba(1 + static_cast<int64_t>(rng_() % 3));
  }

  // Prompts cut from earlier ones at or near snapshot boundaries, with random tails.
  Vec random_tokens() override {
    return random_prompt(align_, true, static_cast<uint32_t>(2 * align_), static_cast<size_t>(max_len_));
  }

  void reference_match(const Vec& tokens, const MatchResult& m, int32_t& kv_len) override {
    last_match_ = reference_.match(tokens);
    kv_len = last_match_.kv_len;
    ASSERT_EQ(m.mamba_len(), last_match_.mamba_len);
    ASSERT_EQ(m.mamba_slot, last_match_.mamba_slot);
  }

  void check_state() override {
    WorkloadBase::check_state();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(fx_.cache.mamba_size(), static_cast<int64_t>(reference_.snaps.size()));
    ASSERT_EQ(fx_.pool.num_free() + static_cast<int32_t>(reference_.snaps.size()), fx_.pool.num_total())
        << "snapshot slots leaked";
    ASSERT_TRUE(fx_.released.empty()) << "a snapshot was released outside an eviction";
  }

  // The snapshots released with the pages an eviction removed must be exactly those pages'; any
  // other released snapshot was cached on a page that stays: a tombstone (only evict_mamba makes
  // those). Consumes fx_.released.
  void apply_released(const std::map<Vec, radix_test::ReferencePages::Page>& removed) {
    std::set<int32_t> released(fx_.released.begin(), fx_.released.end());
    ASSERT_EQ(released.size(), fx_.released.size());
    fx_.released.clear();
    for (const auto& [key, page] : removed) {
      auto snap = reference_.snaps.find(key);
      if (snap != reference_.snaps.end()) {
        ASSERT_EQ(released.erase(snap->second.slot), 1u) << "a freed page's snapshot was not released";
        reference_.snaps.erase(snap);
      }
    }
    for (const int32_t s : released) {
      auto it = std::find_if(reference_.snaps.begin(), reference_.snaps.end(),
                             [&](const auto& e) { return e.second.slot == s; });
      ASSERT_NE(it, reference_.snaps.end()) << "released snapshot slot " << s << " the cache did not hold";
      reference_.snaps.erase(it);
      ++mamba_tombstoned_;
    }
  }

  void on_evicted(const std::map<Vec, radix_test::ReferencePages::Page>& removed) override {
    const int64_t tombstoned_before = mamba_tombstoned_;
    apply_released(removed);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(mamba_tombstoned_, tombstoned_before) << "KV eviction made a tombstone";
  }

  void checked_evict_mamba(int64_t k) {
    std::vector<std::pair<uint64_t, int32_t>> order;  // (last use, slot): no two share a tick
    std::set<int32_t> unlocked_leaf_snaps;
    for (const auto& [key, snap] : reference_.snaps) {
      order.emplace_back(snap.last_access, snap.slot);
      if (reference_.is_leaf(key) && reference_.pages.at(key).locks == 0) unlocked_leaf_snaps.insert(snap.slot);
    }
    std::sort(order.begin(), order.end());
    const Vec freed = fx_.cache.evict_mamba(k);
    const size_t expect = std::min<size_t>(static_cast<size_t>(std::max<int64_t>(k, 0)), order.size());
    ASSERT_EQ(fx_.released.size(), expect) << "evict_mamba(" << k << ") released the wrong number";
    std::set<int32_t> oldest;
    for (size_t i = 0; i < expect; ++i) oldest.insert(order[i].second);
    const std::set<int32_t> released(fx_.released.begin(), fx_.released.end());
    ASSERT_EQ(released, oldest) << "snapshots were not evicted in LRU order";
    for (const int32_t s : released) {
      if (unlocked_leaf_snaps.count(s)) {
        ++mamba_leaf_evicted_;
        bool page_freed = false;
        for (const auto& [key, snap] : reference_.snaps) {
          if (snap.slot == s)
            page_freed = std::find(freed.begin(), freed.end(), reference_.pages.at(key).slots[0]) != freed.end();
        }
        ASSERT_TRUE(page_freed) << "an unlocked leaf lost its snapshot but kept its KV";
      }
    }
    std::map<Vec, radix_test::ReferencePages::Page> removed;
    remove_freed_pages(freed, removed);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    apply_released(removed);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    free_slots(freed);
  }

  // A hybrid model resumes at the snapshot.
  CacheHandle resume_point(const MatchResult& m) override {
    count_tombstone_hit();
    return m.mamba_handle;
  }
  void count_tombstone_hit() {
    if (last_match_.mamba_len < last_match_.kv_len / align_ * align_) ++tombstone_hits_;
  }

  // Caches [0, L): usually up to the last snapshot boundary with a snapshot, sometimes KV only.
  void cache_request(bool finish) override {
    if (reqs_.empty()) return;
    const size_t idx = rng_() % reqs_.size();
    const Request& q = reqs_[idx];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    int32_t len = n / align_ * align_;
    int32_t snapshot = len > 0 && rng_() % 4 != 0 ? fx_.pool.alloc() : -1;
    if (snapshot < 0 && rng_() % 2 == 0) len = n;  // KV only, up to the page-aligned end
    if (len < q.cached_len) len = q.cached_len;
    if (len % align_ != 0 || len == 0) {
      if (snapshot >= 0) fx_.pool.free(snapshot);
      snapshot = -1;
    }
    const Vec tokens = head(q.tokens, len), used = head(q.slots, len);
    const InsertResult r = fx_.cache.insert_with_snapshot(tokens, used, snapshot);
    const auto [k, taken] = reference_.insert(tokens, used, snapshot);
    ASSERT_EQ(r.prefix_len, k);
    ASSERT_EQ(r.mamba_taken, taken);
    if (snapshot >= 0 && !taken) {
      ++duplicate_snapshots_;
      fx_.pool.free(snapshot);
    }
    settle(idx, r, len / ps_ * ps_, finish);
  }

  void probe() {
    MatchResult m;
    checked_match(random_tokens(), m);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    count_tombstone_hit();
  }

  int32_t align_, max_len_;
  Reference::Match last_match_;  // the reference's side of the last checked match
  int64_t resumed_tokens_ = 0, tombstone_hits_ = 0, mamba_tombstoned_ = 0, mamba_leaf_evicted_ = 0;
  int64_t duplicate_snapshots_ = 0;
};

struct WorkloadParams {
  int32_t page_size, chunk, num_slots, num_snapshots;
};

class HybridWorkload : public ::testing::TestWithParam<WorkloadParams> {};

TEST_P(HybridWorkload, MatchesTheBruteForceModelAfterEveryOperation) {
  const WorkloadParams p = GetParam();
  for (uint32_t i = 0; i < 3; ++i) {
    const uint32_t seed = radix_test::base_seed(2026u) + i;
    SCOPED_TRACE("seed " + std::to_string(seed));
    Workload w(p.page_size, p.chunk, p.num_slots, p.num_snapshots, seed);
    w.run(3000);
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(All, HybridWorkload,
                         ::testing::Values(WorkloadParams{1, 8, 320, 12}, WorkloadParams{2, 8, 400, 40},
                                           WorkloadParams{4, 6, 480, 16}, WorkloadParams{16, 16, 960, 10}),
                         [](const auto& info) {
                           return "page" + std::to_string(info.param.page_size) + "_chunk" +
                                  std::to_string(info.param.chunk) + "_snapshots" +
                                  std::to_string(info.param.num_snapshots);
                         });

}  // namespace
}  // namespace rlm
