// RadixCache and NaiveCache: hand-made cases for each mechanism of the KV cache (run on both caches
// built on the radix tree: RadixCache and HybridRadixCache without snapshots behave alike), the
// ownership contract, then a randomized scheduler-like workload checked after every operation
// against a brute-force reference model (radix_test_util.h).
#include "cache/radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/hybrid_radix_cache.h"
#include "cache/naive_cache.h"
#include "cache/page_allocator.h"
#include "cache/prefix_cache.h"
#include "core/check.h"
#include "radix_test_util.h"

namespace rlm {
namespace {

using radix_test::expect_ok;
using radix_test::iota_vec;
using radix_test::Request;
using radix_test::Vec;

template <typename Cache>
std::unique_ptr<Cache> make_cache(int32_t page_size);
template <>
std::unique_ptr<RadixCache> make_cache(int32_t page_size) {
  return std::make_unique<RadixCache>(page_size);
}
template <>
std::unique_ptr<HybridRadixCache> make_cache(int32_t page_size) {
  return std::make_unique<HybridRadixCache>(page_size, 1, [](int32_t) {});
}

template <typename Cache>
class RadixCacheKv : public ::testing::Test {
 protected:
  Cache& make(int32_t page_size) {
    cache_ = make_cache<Cache>(page_size);
    return *cache_;
  }
  std::unique_ptr<Cache> cache_;
};

struct CacheNames {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, RadixCache> ? "RadixCache" : "HybridRadixCache";
  }
};
using KvCaches = ::testing::Types<RadixCache, HybridRadixCache>;
TYPED_TEST_SUITE(RadixCacheKv, KvCaches, CacheNames);

TYPED_TEST(RadixCacheKv, MatchesWhatWasInserted) {
  TypeParam& cache = this->make(1);
  EXPECT_EQ(cache.match_prefix(Vec{1, 2, 3}).length(), 0);
  const InsertResult r = cache.insert(Vec{1, 2, 3, 4}, Vec{10, 11, 12, 13});
  EXPECT_EQ(r.prefix_len, 0);
  EXPECT_EQ(r.handle.length, 4);
  const MatchResult m = cache.match_prefix(Vec{1, 2, 3, 4, 5});
  EXPECT_EQ(m.length(), 4);
  EXPECT_EQ(m.slots, (Vec{10, 11, 12, 13}));
  EXPECT_EQ(cache.total_size(), 4);
  EXPECT_EQ(cache.evictable_size(), 4);
  expect_ok(cache);
}

TYPED_TEST(RadixCacheKv, PartialMatchSplitsAndKeepsHandlesValid) {
  TypeParam& cache = this->make(1);
  const InsertResult r = cache.insert(Vec{1, 2, 3, 4}, Vec{10, 11, 12, 13});
  cache.lock(r.handle);
  EXPECT_EQ(cache.protected_size(), 4);
  const MatchResult m = cache.match_prefix(Vec{1, 2, 9});
  EXPECT_EQ(m.length(), 2);
  EXPECT_EQ(m.slots, (Vec{10, 11}));
  EXPECT_EQ(cache.num_nodes(), 3);  // root, [1 2], [3 4]
  EXPECT_EQ(cache.protected_size(), 4);  // both halves inherited the lock
  expect_ok(cache);
  EXPECT_TRUE(cache.evict(100).empty());
  cache.lock(m.handle);
  cache.unlock(r.handle);  // the pre-split handle still names [1 2 3 4]
  EXPECT_EQ(cache.protected_size(), 2);
  EXPECT_EQ(cache.evictable_size(), 2);
  expect_ok(cache);
  EXPECT_EQ(cache.evict(1), (Vec{12, 13}));  // the unlocked lower half goes, the locked upper stays
  cache.unlock(m.handle);
  EXPECT_EQ(cache.evict(1), (Vec{10, 11}));
  EXPECT_EQ(cache.total_size(), 0);
  expect_ok(cache);
}

TYPED_TEST(RadixCacheKv, InsertReportsThePrefixAlreadyPresentAndKeepsItsSlots) {
  TypeParam& cache = this->make(1);
  EXPECT_EQ(cache.insert(Vec{1, 2, 3}, Vec{10, 11, 12}).prefix_len, 0);
  const InsertResult r = cache.insert(Vec{1, 2, 3, 4, 5}, Vec{90, 91, 92, 93, 94});
  EXPECT_EQ(r.prefix_len, 3);
  EXPECT_EQ(r.handle.length, 5);
  EXPECT_EQ(cache.match_prefix(Vec{1, 2, 3, 4, 5}).slots, (Vec{10, 11, 12, 93, 94}));
  EXPECT_EQ(cache.insert(Vec{1, 2}, Vec{80, 81}).prefix_len, 2);  // fully present: takes nothing
  EXPECT_EQ(cache.total_size(), 5);
  expect_ok(cache);
  EXPECT_THROW(cache.insert(Vec{1, 2}, Vec{80}), Error);
}

TYPED_TEST(RadixCacheKv, PageAlignedKeys) {
  TypeParam& cache = this->make(4);
  const InsertResult r = cache.insert(iota_vec(10, 0), iota_vec(10, 100));
  EXPECT_EQ(r.handle.length, 8);  // the partial last page stays with the caller
  EXPECT_EQ(cache.total_size(), 8);
  Vec probe = iota_vec(7, 0);  // 7 matching tokens: one whole page
  EXPECT_EQ(cache.match_prefix(probe).length(), 4);
  EXPECT_EQ(cache.num_nodes(), 3);  // the match ended inside the node: split at the page boundary
  probe = iota_vec(12, 0);
  probe[6] = 99;  // mismatch inside the second page
  const MatchResult m = cache.match_prefix(probe);
  EXPECT_EQ(m.length(), 4);
  EXPECT_EQ(m.slots, iota_vec(4, 100));
  EXPECT_EQ(cache.num_nodes(), 3);  // a match ending on a node boundary splits nothing
  Vec other = iota_vec(8, 0);
  other[5] = 77;  // shares the first page only
  EXPECT_EQ(cache.insert(other, iota_vec(8, 200)).prefix_len, 4);
  EXPECT_EQ(cache.num_nodes(), 4);
  EXPECT_EQ(cache.match_prefix(other).slots, (Vec{100, 101, 102, 103, 204, 205, 206, 207}));
  expect_ok(cache);
}

TYPED_TEST(RadixCacheKv, EvictsLeastRecentlyUsedLeavesFirst) {
  TypeParam& cache = this->make(1);
  (void)cache.insert(Vec{1, 1}, Vec{10, 11});
  (void)cache.insert(Vec{2, 2}, Vec{20, 21});
  (void)cache.insert(Vec{3, 3}, Vec{30, 31});
  (void)cache.match_prefix(Vec{1, 1});  // A is now the most recent; B is the oldest
  EXPECT_EQ(cache.evict(1), (Vec{20, 21}));
  EXPECT_EQ(cache.evict(2), (Vec{30, 31}));
  EXPECT_EQ(cache.evict(5), (Vec{10, 11}));  // asks for more than exists: frees what there is
  EXPECT_TRUE(cache.evict(1).empty());
  expect_ok(cache);
}

TYPED_TEST(RadixCacheKv, ParentsBecomeEvictableAfterTheirChildrenButLocksProtectThePath) {
  TypeParam& cache = this->make(1);
  (void)cache.insert(Vec{1, 2, 3}, Vec{10, 11, 12});
  const InsertResult b = cache.insert(Vec{1, 2, 4}, Vec{50, 51, 52});
  EXPECT_EQ(b.prefix_len, 2);
  cache.lock(b.handle);
  EXPECT_EQ(cache.protected_size(), 3);  // [1 2] and [4]
  EXPECT_EQ(cache.evict(10), (Vec{12}));
  cache.unlock(b.handle);
  EXPECT_EQ(cache.evict(10), (Vec{52, 10, 11}));  // [4], then its parent [1 2] that became a leaf
  expect_ok(cache);
}

TYPED_TEST(RadixCacheKv, MisuseIsReported) {
  TypeParam& cache = this->make(2);
  const InsertResult r = cache.insert(Vec{1, 2, 3, 4}, Vec{0, 1, 2, 3});
  EXPECT_THROW(cache.unlock(r.handle), Error);  // never locked
  CacheHandle wrong = r.handle;
  wrong.length = 2;
  EXPECT_THROW(cache.lock(wrong), Error);
  cache.lock(r.handle);
  EXPECT_THROW((void)cache.reset(), Error);  // locked prefixes outstanding
  cache.unlock(r.handle);
  EXPECT_EQ(cache.evict(4).size(), 4u);
  EXPECT_THROW(cache.lock(r.handle), Error);  // the node is gone: stale handle
  (void)cache.insert(Vec{5, 6}, Vec{8, 9});  // reuses the arena entry with a new generation
  EXPECT_THROW(cache.lock(r.handle), Error);
  cache.lock(CacheHandle{});  // the empty prefix is always lockable
  cache.unlock(CacheHandle{});
  EXPECT_EQ(cache.reset(), (Vec{8, 9}));
  EXPECT_EQ(cache.total_size(), 0);
  expect_ok(cache);
  EXPECT_THROW(make_cache<TypeParam>(0), Error);
}

// The KV payload checks catch a corrupted slot array (the tree's own checks: radix_tree_test).
TEST(RadixCache, SlotChecksCatchCorruptedPayloads) {
  struct Case {
    const char* what;
    void (*corrupt)(RadixTree<KvSlots>&, int32_t a, int32_t b);
  };
  const Case cases[] = {
      {"slots for", [](RadixTree<KvSlots>& t, int32_t a, int32_t) { t.payload(a).slots.pop_back(); }},
      {"negative slot", [](RadixTree<KvSlots>& t, int32_t a, int32_t) { t.payload(a).slots[0] = -4; }},
      {"cached twice", [](RadixTree<KvSlots>& t, int32_t a, int32_t b) { t.payload(b).slots[1] = t.payload(a).slots[0]; }},
      {"root holds slots", [](RadixTree<KvSlots>& t, int32_t, int32_t) { t.payload(RadixTreeBase::kRoot).slots = {7}; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RadixTree<KvSlots> tree(2, "RadixCache");
    const InsertResult a = kv_tree::insert(tree, Vec{1, 2, 3, 4}, Vec{10, 11, 12, 13});
    const InsertResult b = kv_tree::insert(tree, Vec{5, 6}, Vec{20, 21});
    ASSERT_TRUE(kv_tree::check(tree).is_ok());
    c.corrupt(tree, a.handle.node, b.handle.node);
    ASSERT_TRUE(tree.check_integrity().is_ok()) << "a payload corruption must not look structural";
    const Status st = kv_tree::check(tree);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
    EXPECT_EQ(st.message().rfind("RadixCache integrity: ", 0), 0u) << st.message();
  }
}

TEST(NaiveCache, SharesNothingAndTakesNoSlots) {
  NaiveCache cache(4);
  const InsertResult r = cache.insert(iota_vec(9, 0), iota_vec(9, 0));
  EXPECT_EQ(r.prefix_len, 0);
  EXPECT_EQ(r.handle.length, 0);  // the caller keeps (and frees) every slot
  const MatchResult m = cache.match_prefix(iota_vec(9, 0));
  EXPECT_EQ(m.length(), 0);
  EXPECT_TRUE(m.slots.empty());
  cache.lock(m.handle);
  cache.unlock(m.handle);
  EXPECT_THROW(cache.lock(CacheHandle{3, 0, 8}), Error);
  EXPECT_TRUE(cache.evict(100).empty());
  EXPECT_EQ(cache.total_size(), 0);
  EXPECT_TRUE(cache.check_integrity().is_ok());
  EXPECT_THROW(cache.insert(Vec{1}, Vec{}), Error);
}

TEST(PrefixCacheFactory, MakesBothKindsAndRejectsOthers) {
  auto radix = make_prefix_cache("radix", 16);
  ASSERT_TRUE(radix.is_ok());
  EXPECT_EQ((*radix)->page_size(), 16);
  EXPECT_NE(dynamic_cast<RadixCache*>(radix->get()), nullptr);
  auto naive = make_prefix_cache("naive", 1);
  ASSERT_TRUE(naive.is_ok());
  EXPECT_NE(dynamic_cast<NaiveCache*>(naive->get()), nullptr);
  EXPECT_EQ(make_prefix_cache("lru", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_prefix_cache("radix", 0).status().code(), StatusCode::kInvalidArgument);
}

// ---- randomized workload against a reference model -------------------------------------------

// The cache and its reference, declared before WorkloadBase so that they outlive it.
struct RadixState {
  RadixState(int32_t page_size) : radix_(page_size), reference_(page_size) {}
  RadixCache radix_;
  radix_test::ReferencePages reference_;
};

class Workload : private RadixState, public radix_test::WorkloadBase {
 public:
  Workload(int32_t page_size, int32_t num_slots, uint32_t seed)
      : RadixState(page_size),
        WorkloadBase(radix_, reference_, page_size, num_slots, seed),
        max_len_(std::max(48, 7 * page_size)) {}

  void run(int num_ops) {
    if (!run_ops(num_ops)) return;
    evict_everything();
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(radix_.num_nodes(), 1);
    ASSERT_TRUE(cache_.check_integrity().is_ok());
    // The run must have exercised what it claims to test.
    EXPECT_GT(hit_tokens_, 0);
    EXPECT_GT(evicted_tokens_, 0);
    EXPECT_GT(duplicate_tokens_, 0);
    EXPECT_GT(locked_at_evict_, 0);
    if (std::getenv("RADIXLM_TEST_VERBOSE") != nullptr) {
      std::printf("page_size %d: hit %lld, evicted %lld, duplicate %lld tokens, max nodes %d\n", ps_,
                  static_cast<long long>(hit_tokens_), static_cast<long long>(evicted_tokens_),
                  static_cast<long long>(duplicate_tokens_), max_nodes_);
    }
  }

 private:
  void step(uint32_t op) override {
    if (op < 22) hit_tokens_ += admit();
    else if (op < 36) extend(static_cast<uint32_t>(ps_ + 2), std::numeric_limits<size_t>::max());
    else if (op < 48) cache_request(/*finish=*/false);
    else if (op < 64) cache_request(/*finish=*/true);
    else if (op < 70) abort_request();
    else if (op < 88) probe();
    else if (op < 95) checked_evict(1 + static_cast<int64_t>(rng_() % static_cast<uint32_t>(4 * ps_)));
    else verify_contents();
  }

  Vec random_tokens() override {
    return random_prompt(ps_, false, static_cast<uint32_t>(2 * ps_ + 6), static_cast<size_t>(max_len_));
  }

  void cache_request(bool finish) override {
    if (reqs_.empty()) return;
    const size_t idx = rng_() % reqs_.size();
    const Request& q = reqs_[idx];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    const Vec used = radix_test::head(q.slots, n);
    const InsertResult r = cache_.insert(q.tokens, used);
    const int32_t k = ref_.insert(q.tokens, used);
    ASSERT_EQ(r.prefix_len, k) << "insert reported the wrong already-cached length";
    settle(idx, r, n / ps_ * ps_, finish);
  }

  void probe() {
    MatchResult m;
    checked_match(random_tokens(), m);
  }

  // Every cached sequence matches in full with the reference's slots, and no slot is held twice
  // (by two cached pages, or by the cache and a request).
  void verify_contents() {
    std::vector<Vec> leaves;
    for (const auto& [key, page] : ref_.pages) {
      if (ref_.is_leaf(key)) leaves.push_back(key);
    }
    for (const Vec& leaf : leaves) {
      const MatchResult m = cache_.match_prefix(leaf);
      ASSERT_EQ(ref_.match(leaf), static_cast<int32_t>(leaf.size()));
      ASSERT_EQ(m.length(), static_cast<int32_t>(leaf.size()));
      ASSERT_EQ(m.slots, ref_.slots(leaf, m.length()));
    }
    std::vector<uint8_t> held(static_cast<size_t>(num_pages_ * ps_), 0);
    auto hold = [&](int32_t slot) {
      ASSERT_TRUE(slot >= 0 && slot < num_pages_ * ps_);
      ASSERT_EQ(held[static_cast<size_t>(slot)]++, 0) << "slot " << slot << " is held twice";
      ASSERT_TRUE(alloc_.is_allocated(slot / ps_)) << "slot " << slot << " is held but its page is free";
    };
    for (const auto& [key, page] : ref_.pages) {
      for (const int32_t slot : page.slots) hold(slot);
    }
    for (const Request& q : reqs_) {
      for (size_t i = static_cast<size_t>(q.cached_len); i < q.slots.size(); ++i) hold(q.slots[i]);
    }
  }

  void check_state() override {
    WorkloadBase::check_state();
    max_nodes_ = std::max(max_nodes_, radix_.num_nodes());
  }

  int32_t max_len_;
  int64_t hit_tokens_ = 0;
  int32_t max_nodes_ = 0;
};

TEST(PrefixCacheContract, BothImplementationsReturnEveryPage) {
  for (const char* kind : {"radix", "naive"}) {
    for (const int32_t ps : {1, 4}) {
      const uint32_t seed = radix_test::base_seed(1122u);
      SCOPED_TRACE(std::string(kind) + ", page_size " + std::to_string(ps) + ", seed " + std::to_string(seed));
      auto cache = make_prefix_cache(kind, ps);
      ASSERT_TRUE(cache.is_ok());
      radix_test::run_contract_flow(**cache, seed, 2000);
      if (HasFailure()) return;
    }
  }
}

class RadixCacheRandom : public ::testing::TestWithParam<int32_t> {};

TEST_P(RadixCacheRandom, AgreesWithReferenceModel) {
  const int32_t page_size = GetParam();
  for (uint32_t round = 0; round < 4; ++round) {
    const uint32_t seed = radix_test::base_seed(1122u) + round;
    const int32_t num_slots = round % 2 == 0 ? 640 : 4096;  // tight pool: constant eviction; roomy: deep trees
    SCOPED_TRACE("page_size " + std::to_string(page_size) + ", " + std::to_string(num_slots) + " slots, seed " +
                 std::to_string(seed) + " (rerun with RADIXLM_TEST_SEED=" + std::to_string(seed - round) + ")");
    Workload workload(page_size, num_slots, seed);
    workload.run(4000);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, RadixCacheRandom, ::testing::Values(1, 2, 4, 16),
                         [](const ::testing::TestParamInfo<int32_t>& info) {
                           return "page_size_" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace rlm
