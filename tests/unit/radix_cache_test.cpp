// RadixCache and NaiveCache: hand-made cases for each mechanism, then a randomized scheduler-like
// workload checked after every operation against a brute-force reference model.
#include "cache/radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache/naive_cache.h"
#include "cache/page_allocator.h"
#include "cache/prefix_cache.h"
#include "core/check.h"

namespace rlm {
namespace {

using Vec = std::vector<int32_t>;

Vec iota_vec(int32_t n, int32_t start) {
  Vec v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

void expect_ok(const PrefixCache& cache) {
  const Status st = cache.check_integrity();
  EXPECT_TRUE(st.is_ok()) << st.to_string() << "\n" << cache.to_string();
}

TEST(RadixCache, MatchesWhatWasInserted) {
  RadixCache cache(1);
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

TEST(RadixCache, PartialMatchSplitsAndKeepsHandlesValid) {
  RadixCache cache(1);
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

TEST(RadixCache, InsertReportsThePrefixAlreadyPresentAndKeepsItsSlots) {
  RadixCache cache(1);
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

TEST(RadixCache, PageAlignedKeys) {
  RadixCache cache(4);
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

TEST(RadixCache, EvictsLeastRecentlyUsedLeavesFirst) {
  RadixCache cache(1);
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

TEST(RadixCache, ParentsBecomeEvictableAfterTheirChildrenButLocksProtectThePath) {
  RadixCache cache(1);
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

TEST(RadixCache, MisuseIsReported) {
  RadixCache cache(2);
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
  EXPECT_THROW(RadixCache(0), Error);
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

uint32_t base_seed() {
  const char* env = std::getenv("RADIXLM_TEST_SEED");
  return env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 1122u;
}

// Brute force: every cached page, keyed by the whole token prefix that ends with it (so the key
// set is prefix-closed), with its slots, last-access tick and lock count.
class ReferenceCache {
 public:
  struct Page {
    Vec slots;  // [page_size]
    uint64_t last_access = 0;
    int32_t locks = 0;
  };
  using Map = std::map<Vec, Page>;

  explicit ReferenceCache(int32_t page_size) : ps_(page_size) {}

  int32_t longest(const Vec& tokens) const {
    int32_t k = 0;
    while (k + ps_ <= static_cast<int32_t>(tokens.size()) && pages_.count(prefix(tokens, k + ps_)) > 0) k += ps_;
    return k;
  }
  Vec slots(const Vec& tokens, int32_t len) const {
    Vec out;
    for (int32_t j = ps_; j <= len; j += ps_) {
      const Vec& s = pages_.at(prefix(tokens, j)).slots;
      out.insert(out.end(), s.begin(), s.end());
    }
    return out;
  }
  int32_t match(const Vec& tokens) {
    const uint64_t tick = ++clock_;
    const int32_t k = longest(tokens);
    touch(tokens, k, tick);
    return k;
  }
  int32_t insert(const Vec& tokens, const Vec& slots) {
    const uint64_t tick = ++clock_;
    const int32_t aligned = static_cast<int32_t>(tokens.size()) / ps_ * ps_;
    const int32_t k = longest(tokens);
    for (int32_t j = k; j < aligned; j += ps_) {
      pages_[prefix(tokens, j + ps_)] = Page{Vec(slots.begin() + j, slots.begin() + j + ps_), tick, 0};
    }
    touch(tokens, aligned, tick);
    return k;
  }
  void add_locks(const Vec& tokens, int32_t len, int32_t delta) {
    for (int32_t j = ps_; j <= len; j += ps_) {
      Page& p = pages_.at(prefix(tokens, j));
      p.locks += delta;
      ASSERT_GE(p.locks, 0) << "reference lock count went negative";
    }
  }
  bool is_leaf(Map::const_iterator it) const {
    const auto next = std::next(it);
    return next == pages_.end() || next->first.size() <= it->first.size() ||
           !std::equal(it->first.begin(), it->first.end(), next->first.begin());
  }
  int64_t size_where(bool locked) const {
    int64_t n = 0;
    for (const auto& [key, page] : pages_) n += (page.locks > 0) == locked ? ps_ : 0;
    return n;
  }
  Map& pages() { return pages_; }
  static Vec prefix(const Vec& t, int32_t n) { return Vec(t.begin(), t.begin() + n); }

 private:
  void touch(const Vec& tokens, int32_t len, uint64_t tick) {
    for (int32_t j = ps_; j <= len; j += ps_) pages_.at(prefix(tokens, j)).last_access = tick;
  }

  int32_t ps_;
  Map pages_;
  uint64_t clock_ = 0;
};

// A request as a scheduler keeps it: slots [0, cached_len) are the cache's (locked through
// handle), slots [cached_len, slots.size()) are whole pages the request allocated itself.
struct Request {
  Vec tokens;
  CacheHandle handle;
  int32_t cached_len = 0;
  Vec slots;  // [whole pages >= tokens.size()]
};

class Workload {
 public:
  Workload(int32_t page_size, int32_t num_slots, uint32_t seed)
      : ps_(page_size),
        max_len_(std::max(48, 7 * page_size)),
        num_pages_(num_slots / page_size),
        rng_(seed),
        cache_(page_size),
        ref_(page_size),
        alloc_(num_pages_) {}

  void run(int num_ops) {
    for (int i = 0; i < num_ops; ++i) {
      const uint32_t op = rng_() % 100;
      if (op < 22) admit();
      else if (op < 36) extend();
      else if (op < 48) cache_request(/*finish=*/false);
      else if (op < 64) cache_request(/*finish=*/true);
      else if (op < 70) abort_request();
      else if (op < 88) probe();
      else if (op < 95) checked_evict(1 + static_cast<int64_t>(rng_() % static_cast<uint32_t>(4 * ps_)));
      else verify_contents();
      if (!::testing::Test::HasFatalFailure()) check_state();
      if (::testing::Test::HasFatalFailure()) {
        ADD_FAILURE() << "failed at operation " << i << "; cache:\n" << cache_.to_string();
        return;
      }
    }
    while (!reqs_.empty() && !::testing::Test::HasFatalFailure()) {
      rng_() % 2 ? cache_request(true) : abort_request();
    }
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(cache_.protected_size(), 0);
    checked_evict(cache_.total_size() + 1);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(cache_.total_size(), 0);
    ASSERT_TRUE(ref_.pages().empty());
    ASSERT_EQ(cache_.num_nodes(), 1);
    ASSERT_EQ(alloc_.num_free(), num_pages_);
    ASSERT_TRUE(cache_.check_integrity().is_ok());
    // The run must have exercised what it claims to test.
    EXPECT_GT(stats_.hit_tokens, 0);
    EXPECT_GT(stats_.evicted_tokens, 0);
    EXPECT_GT(stats_.duplicate_tokens, 0);
    EXPECT_GT(stats_.locked_at_evict, 0);
    if (std::getenv("RADIXLM_TEST_VERBOSE") != nullptr) {
      std::printf("page_size %d: hit %lld, evicted %lld, duplicate %lld tokens, max nodes %d\n", ps_,
                  static_cast<long long>(stats_.hit_tokens), static_cast<long long>(stats_.evicted_tokens),
                  static_cast<long long>(stats_.duplicate_tokens), stats_.max_nodes);
    }
  }

 private:
  Vec random_tokens() {
    Vec t;
    if (!history_.empty() && rng_() % 5 != 0) {
      const Vec& base = history_[rng_() % history_.size()];
      size_t cut = rng_() % (base.size() + 1);
      if (rng_() % 2 == 0) cut = cut / static_cast<size_t>(ps_) * static_cast<size_t>(ps_);
      t.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(cut));
    }
    const size_t target = std::min<size_t>(static_cast<size_t>(max_len_), t.size() + 1 + rng_() % (2 * ps_ + 6));
    while (t.size() < target) t.push_back(static_cast<int32_t>(rng_() % 3));
    return t;
  }

  void remember(const Vec& tokens) {
    if (history_.size() < 24) history_.push_back(tokens);
    else history_[rng_() % history_.size()] = tokens;
  }

  void free_slots(const Vec& slots) { alloc_.free(slots_to_pages(slots, ps_)); }

  // Allocates n pages, evicting from the cache on a shortage; nullopt when that is not enough.
  std::optional<Vec> alloc_pages(int32_t n) {
    if (auto pages = alloc_.alloc(n)) return pages;
    const int32_t free_before = alloc_.num_free();
    checked_evict(static_cast<int64_t>(n - free_before) * ps_);
    return alloc_.alloc(n);
  }

  void checked_evict(int64_t n) {
    for (const auto& [key, page] : ref_.pages()) stats_.locked_at_evict += page.locks > 0 ? 1 : 0;
    const Vec freed = cache_.evict(n);
    std::unordered_map<int32_t, const Vec*> owner;
    for (const auto& [key, page] : ref_.pages()) {
      for (const int32_t slot : page.slots) owner[slot] = &key;
    }
    std::map<Vec, int32_t> hits;
    for (const int32_t slot : freed) {
      const auto it = owner.find(slot);
      ASSERT_NE(it, owner.end()) << "evicted slot " << slot << " that was not cached";
      ++hits[*it->second];
    }
    uint64_t newest_evicted = 0;
    for (const auto& [key, count] : hits) {
      ASSERT_EQ(count, ps_) << "eviction freed part of a page";
      const ReferenceCache::Page& page = ref_.pages().at(key);
      ASSERT_EQ(page.locks, 0) << "evicted a locked page";
      newest_evicted = std::max(newest_evicted, page.last_access);
    }
    int64_t newest_tokens = 0;  // tokens of the evicted pages last used at newest_evicted
    for (const auto& [key, count] : hits) {
      if (ref_.pages().at(key).last_access == newest_evicted) newest_tokens += ps_;
      ref_.pages().erase(key);
    }
    for (const auto& [key, page] : ref_.pages()) {
      if (key.size() > static_cast<size_t>(ps_)) {
        ASSERT_EQ(ref_.pages().count(ReferenceCache::prefix(key, static_cast<int32_t>(key.size()) - ps_)), 1u)
            << "eviction left a page without its parent";
      }
    }
    bool evictable_left = false;
    for (auto it = ref_.pages().cbegin(); it != ref_.pages().cend(); ++it) {
      if (it->second.locks > 0 || !ref_.is_leaf(it)) continue;
      evictable_left = true;
      ASSERT_GE(it->second.last_access, newest_evicted) << "evicted a page used more recently than a kept leaf";
    }
    const int64_t got = static_cast<int64_t>(freed.size());
    if (n <= 0) {
      ASSERT_EQ(got, 0);
    }
    if (got < n) {
      ASSERT_FALSE(evictable_left) << "evict(" << n << ") stopped at " << got << " with leaves left";
    }
    if (got > 0) {
      ASSERT_LT(got - newest_tokens, n) << "evict(" << n << ") went on after freeing enough";
    }
    stats_.evicted_tokens += got;
    free_slots(freed);
  }

  void admit() {
    if (reqs_.size() >= 8) return;
    Request q;
    q.tokens = random_tokens();
    const MatchResult m = cache_.match_prefix(q.tokens);
    const int32_t k = ref_.match(q.tokens);
    ASSERT_EQ(m.length(), k);
    ASSERT_EQ(m.slots, ref_.slots(q.tokens, k));
    cache_.lock(m.handle);
    ref_.add_locks(q.tokens, k, +1);
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    const auto pages = alloc_pages((n - k + ps_ - 1) / ps_);
    if (::testing::Test::HasFatalFailure()) return;
    if (!pages) {
      cache_.unlock(m.handle);
      ref_.add_locks(q.tokens, k, -1);
      return;
    }
    stats_.hit_tokens += k;
    q.handle = m.handle;
    q.cached_len = k;
    q.slots = m.slots;
    const Vec own = pages_to_slots(*pages, ps_);
    q.slots.insert(q.slots.end(), own.begin(), own.end());
    remember(q.tokens);
    reqs_.push_back(std::move(q));
  }

  void extend() {  // decode steps: append tokens, filling the last page before taking new ones
    if (reqs_.empty()) return;
    Request& q = reqs_[rng_() % reqs_.size()];
    const size_t new_len = q.tokens.size() + 1 + rng_() % static_cast<size_t>(ps_ + 2);
    const int32_t have = static_cast<int32_t>(q.slots.size()) / ps_;
    const int32_t need = static_cast<int32_t>((new_len + static_cast<size_t>(ps_) - 1) / static_cast<size_t>(ps_));
    const auto pages = alloc_pages(std::max(0, need - have));
    if (!pages) return;
    const Vec own = pages_to_slots(*pages, ps_);
    q.slots.insert(q.slots.end(), own.begin(), own.end());
    while (q.tokens.size() < new_len) q.tokens.push_back(static_cast<int32_t>(rng_() % 3));
  }

  void cache_request(bool finish) {
    if (reqs_.empty()) return;
    const size_t idx = rng_() % reqs_.size();
    Request& q = reqs_[idx];
    const int32_t n = static_cast<int32_t>(q.tokens.size());
    const int32_t aligned = n / ps_ * ps_;
    const Vec used(q.slots.begin(), q.slots.begin() + n);
    const InsertResult r = cache_.insert(q.tokens, used);
    const int32_t k = ref_.insert(q.tokens, used);
    ASSERT_EQ(r.prefix_len, k) << "insert reported the wrong already-cached length";
    ASSERT_GE(r.prefix_len, q.cached_len) << "a locked prefix disappeared";
    ASSERT_EQ(r.handle.length, aligned);
    stats_.duplicate_tokens += r.prefix_len - q.cached_len;
    free_slots(Vec(q.slots.begin() + q.cached_len, q.slots.begin() + r.prefix_len));
    if (finish) {
      cache_.unlock(q.handle);
      ref_.add_locks(q.tokens, q.cached_len, -1);
      free_slots(Vec(q.slots.begin() + aligned, q.slots.end()));
      remember(q.tokens);
      reqs_.erase(reqs_.begin() + static_cast<std::ptrdiff_t>(idx));
      return;
    }
    const Vec prefix = ReferenceCache::prefix(q.tokens, aligned);
    const MatchResult m = cache_.match_prefix(prefix);
    ASSERT_EQ(ref_.match(prefix), aligned);
    ASSERT_EQ(m.length(), aligned);
    ASSERT_EQ(m.slots, ref_.slots(prefix, aligned));
    ASSERT_EQ(m.handle.node, r.handle.node);
    ASSERT_EQ(m.handle.generation, r.handle.generation);
    cache_.lock(m.handle);
    ref_.add_locks(q.tokens, aligned, +1);
    cache_.unlock(q.handle);
    ref_.add_locks(q.tokens, q.cached_len, -1);
    std::copy(m.slots.begin(), m.slots.end(), q.slots.begin());
    q.handle = m.handle;
    q.cached_len = aligned;
  }

  void abort_request() {
    if (reqs_.empty()) return;
    const size_t idx = rng_() % reqs_.size();
    Request& q = reqs_[idx];
    cache_.unlock(q.handle);
    ref_.add_locks(q.tokens, q.cached_len, -1);
    free_slots(Vec(q.slots.begin() + q.cached_len, q.slots.end()));
    reqs_.erase(reqs_.begin() + static_cast<std::ptrdiff_t>(idx));
  }

  void probe() {
    const Vec tokens = random_tokens();
    const MatchResult m = cache_.match_prefix(tokens);
    const int32_t k = ref_.match(tokens);
    ASSERT_EQ(m.length(), k);
    ASSERT_EQ(m.slots, ref_.slots(tokens, k));
  }

  // Every cached sequence matches in full with the reference's slots, and no slot is held twice
  // (by two cached pages, or by the cache and a request).
  void verify_contents() {
    std::vector<Vec> leaves;
    for (auto it = ref_.pages().cbegin(); it != ref_.pages().cend(); ++it) {
      if (ref_.is_leaf(it)) leaves.push_back(it->first);
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
    for (const auto& [key, page] : ref_.pages()) {
      for (const int32_t slot : page.slots) hold(slot);
    }
    for (const Request& q : reqs_) {
      for (size_t i = static_cast<size_t>(q.cached_len); i < q.slots.size(); ++i) hold(q.slots[i]);
    }
  }

  void check_state() {
    const Status st = cache_.check_integrity();
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    stats_.max_nodes = std::max(stats_.max_nodes, cache_.num_nodes());
    ASSERT_EQ(cache_.evictable_size(), ref_.size_where(/*locked=*/false));
    ASSERT_EQ(cache_.protected_size(), ref_.size_where(/*locked=*/true));
    int64_t request_tokens = 0;
    for (const Request& q : reqs_) request_tokens += static_cast<int64_t>(q.slots.size()) - q.cached_len;
    ASSERT_EQ(static_cast<int64_t>(alloc_.num_free()) * ps_ + cache_.total_size() + request_tokens,
              static_cast<int64_t>(num_pages_) * ps_)
        << "pages leaked or double-owned";
  }

  struct Stats {
    int64_t hit_tokens = 0;
    int64_t evicted_tokens = 0;
    int64_t duplicate_tokens = 0;
    int64_t locked_at_evict = 0;
    int32_t max_nodes = 0;
  };

  int32_t ps_;
  int32_t max_len_;
  int32_t num_pages_;
  std::mt19937 rng_;
  RadixCache cache_;
  ReferenceCache ref_;
  PageAllocator alloc_;
  std::vector<Request> reqs_;
  std::vector<Vec> history_;
  Stats stats_;
};

// The ownership contract of prefix_cache.h, written once against the interface, must leak no page
// and free none twice with either implementation.
void run_contract_flow(PrefixCache& cache, uint32_t seed, int num_ops) {
  const int32_t ps = cache.page_size();
  const int32_t num_pages = 1024 / ps;
  PageAllocator alloc(num_pages);
  std::mt19937 rng(seed);
  std::vector<Request> reqs;
  const Vec shared = iota_vec(3 * ps, 0);  // a common system prompt
  for (int i = 0; i < num_ops; ++i) {
    const uint32_t op = rng() % 3;
    if (op == 0 && reqs.size() < 6) {  // admit
      Request q;
      q.tokens = shared;
      for (uint32_t j = 0, extra = 1 + rng() % static_cast<uint32_t>(3 * ps); j < extra; ++j) {
        q.tokens.push_back(static_cast<int32_t>(rng() % 2));
      }
      const MatchResult m = cache.match_prefix(Vec(q.tokens.begin(), q.tokens.end() - 1));
      cache.lock(m.handle);
      const int32_t need = (static_cast<int32_t>(q.tokens.size()) - m.length() + ps - 1) / ps;
      auto pages = alloc.alloc(need);
      if (!pages) {
        const Vec freed = cache.evict(static_cast<int64_t>(need - alloc.num_free()) * ps);
        alloc.free(slots_to_pages(freed, ps));
        pages = alloc.alloc(need);
      }
      if (!pages) {
        cache.unlock(m.handle);
        continue;
      }
      q.handle = m.handle;
      q.cached_len = m.length();
      q.slots = m.slots;
      const Vec own = pages_to_slots(*pages, ps);
      q.slots.insert(q.slots.end(), own.begin(), own.end());
      reqs.push_back(std::move(q));
    } else if (!reqs.empty()) {  // cache a chunk (op 1) or finish (op 2)
      const size_t idx = rng() % reqs.size();
      Request& q = reqs[idx];
      const int32_t n = static_cast<int32_t>(q.tokens.size());
      const InsertResult r = cache.insert(q.tokens, Vec(q.slots.begin(), q.slots.begin() + n));
      ASSERT_GE(r.prefix_len, q.cached_len);
      alloc.free(slots_to_pages(Vec(q.slots.begin() + q.cached_len, q.slots.begin() + r.prefix_len), ps));
      if (op == 2) {
        cache.unlock(q.handle);
        alloc.free(slots_to_pages(Vec(q.slots.begin() + r.handle.length, q.slots.end()), ps));
        reqs.erase(reqs.begin() + static_cast<std::ptrdiff_t>(idx));
      } else {
        const MatchResult m = cache.match_prefix(Vec(q.tokens.begin(), q.tokens.begin() + r.handle.length));
        ASSERT_EQ(m.handle, r.handle);
        cache.lock(m.handle);
        cache.unlock(q.handle);
        std::copy(m.slots.begin(), m.slots.end(), q.slots.begin());
        q.handle = m.handle;
        q.cached_len = m.length();
      }
    }
    int64_t request_tokens = 0;
    for (const Request& q : reqs) request_tokens += static_cast<int64_t>(q.slots.size()) - q.cached_len;
    ASSERT_EQ(static_cast<int64_t>(alloc.num_free()) * ps + cache.total_size() + request_tokens,
              static_cast<int64_t>(num_pages) * ps);
    ASSERT_TRUE(cache.check_integrity().is_ok());
  }
  for (Request& q : reqs) {
    cache.unlock(q.handle);
    alloc.free(slots_to_pages(Vec(q.slots.begin() + q.cached_len, q.slots.end()), ps));
  }
  alloc.free(slots_to_pages(cache.reset(), ps));
  EXPECT_EQ(alloc.num_free(), num_pages);
}

TEST(PrefixCacheContract, BothImplementationsReturnEveryPage) {
  for (const char* kind : {"radix", "naive"}) {
    for (const int32_t ps : {1, 4}) {
      const uint32_t seed = base_seed();
      SCOPED_TRACE(std::string(kind) + ", page_size " + std::to_string(ps) + ", seed " + std::to_string(seed));
      auto cache = make_prefix_cache(kind, ps);
      ASSERT_TRUE(cache.is_ok());
      run_contract_flow(**cache, seed, 2000);
      if (HasFailure()) return;
    }
  }
}

class RadixCacheRandom : public ::testing::TestWithParam<int32_t> {};

TEST_P(RadixCacheRandom, AgreesWithReferenceModel) {
  const int32_t page_size = GetParam();
  for (uint32_t round = 0; round < 4; ++round) {
    const uint32_t seed = base_seed() + round;
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
