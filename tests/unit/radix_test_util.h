// Shared fixtures of the radix prefix cache tests (radix_cache_test, hybrid_radix_cache_test,
// radix_tree_test): vector helpers, the test seed, a brute-force reference model of the KV rules,
// a scheduler-like randomized workload that checks a cache against the reference and the cache's
// integrity after every operation, and the ownership-contract flow written against PrefixCache.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/page_allocator.h"
#include "cache/prefix_cache.h"

namespace rlm::radix_test {

using Vec = std::vector<int32_t>;

inline Vec iota_vec(int32_t n, int32_t start) {
  Vec v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}
inline Vec head(const Vec& v, int32_t n) { return Vec(v.begin(), v.begin() + n); }

// The seed of a randomized test: RADIXLM_TEST_SEED when set, else the test's own default.
inline uint32_t base_seed(uint32_t fallback) {
  const char* env = std::getenv("RADIXLM_TEST_SEED");
  return env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : fallback;
}

inline void expect_ok(const PrefixCache& cache) {
  const Status st = cache.check_integrity();
  EXPECT_TRUE(st.is_ok()) << st.to_string() << "\n" << cache.to_string();
}

// Brute force of the KV rules: every cached page, keyed by the whole token prefix that ends with it
// (so the key set is prefix-closed), with its slots, last-access tick and lock count. A match is
// the longest cached page prefix and stamps it; an insert adds the missing pages and stamps the
// whole page-aligned path; each ticks the clock once.
class ReferencePages {
 public:
  struct Page {
    Vec slots;  // [page_size]
    uint64_t last_access = 0;
    int32_t locks = 0;
  };

  explicit ReferencePages(int32_t page_size) : ps_(page_size) {}

  int32_t longest(const Vec& t) const {
    int32_t k = 0;
    while (k + ps_ <= static_cast<int32_t>(t.size()) && pages.count(head(t, k + ps_)) > 0) k += ps_;
    return k;
  }
  Vec slots(const Vec& t, int32_t len) const {
    Vec out;
    for (int32_t j = ps_; j <= len; j += ps_) {
      const Vec& s = pages.at(head(t, j)).slots;
      out.insert(out.end(), s.begin(), s.end());
    }
    return out;
  }
  int32_t match(const Vec& t) {
    const uint64_t tick = ++clock_;
    const int32_t k = longest(t);
    touch(t, k, tick);
    return k;
  }
  // Returns the length that was already cached.
  int32_t insert(const Vec& t, const Vec& s) {
    const uint64_t tick = ++clock_;
    const int32_t aligned = static_cast<int32_t>(t.size()) / ps_ * ps_;
    const int32_t k = longest(t);
    for (int32_t j = k; j < aligned; j += ps_) {
      pages[head(t, j + ps_)] = Page{Vec(s.begin() + j, s.begin() + j + ps_), tick, 0};
    }
    touch(t, aligned, tick);
    return k;
  }
  void add_locks(const Vec& t, int32_t len, int32_t delta) {
    for (int32_t j = ps_; j <= len; j += ps_) {
      Page& p = pages.at(head(t, j));
      p.locks += delta;
      ASSERT_GE(p.locks, 0) << "reference lock count went negative";
    }
  }
  bool is_leaf(const Vec& key) const {
    const auto next = pages.upper_bound(key);
    return next == pages.end() || next->first.size() <= key.size() ||
           !std::equal(key.begin(), key.end(), next->first.begin());
  }
  int64_t size_where(bool locked) const {
    int64_t n = 0;
    for (const auto& [key, page] : pages) n += (page.locks > 0) == locked ? ps_ : 0;
    return n;
  }
  uint64_t clock() const { return clock_; }  // the tick of the last match or insert
  int32_t page_size() const { return ps_; }

  std::map<Vec, Page> pages;

 private:
  void touch(const Vec& t, int32_t len, uint64_t tick) {
    for (int32_t j = ps_; j <= len; j += ps_) pages.at(head(t, j)).last_access = tick;
  }

  int32_t ps_;
  uint64_t clock_ = 0;
};

// A request as a scheduler keeps it: slots [0, cached_len) are the cache's (locked through handle),
// slots [cached_len, slots.size()) are whole pages the request allocated itself.
struct Request {
  Vec tokens;
  CacheHandle handle;
  int32_t cached_len = 0;
  Vec slots;  // [whole pages >= tokens.size()]
};

// A scheduler-like randomized driver of a cache and its reference model: requests are admitted
// (match, lock, allocate their own pages), extended by decode steps, cached chunk by chunk or at
// finish under the ownership contract of prefix_cache.h, aborted, probed; pages come from a
// PageAllocator that evicts from the cache on a shortage. After every operation the cache's
// integrity, its sizes against the reference and the conservation of pages are checked. A test's
// workload derives from this and supplies the operation mix and what its cache adds (snapshots);
// the cache and the reference it passes here must outlive this (a base class declared before this
// one that holds them does).
class WorkloadBase {
 public:
  WorkloadBase(PrefixCache& cache, ReferencePages& ref, int32_t page_size, int32_t num_slots, uint32_t seed)
      : ps_(page_size), num_pages_(num_slots / page_size), rng_(seed), cache_(cache), ref_(ref), alloc_(num_pages_) {}
  virtual ~WorkloadBase() = default;

 protected:
  // One operation of the mix; op is uniform in [0, 100).
  virtual void step(uint32_t op) = 0;
  // A prompt for a new request or a probe (random_prompt with the test's shape).
  virtual Vec random_tokens() = 0;
  // Where a request admitted with match m resumes (called once per admission): the KV match, or
  // for a hybrid model the snapshot.
  virtual CacheHandle resume_point(const MatchResult& m) { return m.handle; }
  // Caches a random request (finish: and ends it) through the cache's insert, then settle().
  virtual void cache_request(bool finish) = 0;
  // The reference's side of a match that the cache answered with m: its KV length goes to kv_len.
  // A cache with more to match (the resume point of a hybrid cache) checks that here too.
  virtual void reference_match(const Vec& tokens, const MatchResult& m, int32_t& kv_len) {
    (void)m;
    kv_len = ref_.match(tokens);
  }
  // The payload's share of an eviction: `removed` are the pages evict() freed (already checked
  // and gone from the reference).
  virtual void on_evicted(const std::map<Vec, ReferencePages::Page>& removed) { (void)removed; }
  // Integrity, both sizes against the reference, page conservation (the cache may check more).
  virtual void check_state() {
    const Status st = cache_.check_integrity();
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(cache_.evictable_size(), ref_.size_where(/*locked=*/false));
    ASSERT_EQ(cache_.protected_size(), ref_.size_where(/*locked=*/true));
    int64_t request_tokens = 0;
    for (const Request& q : reqs_) request_tokens += static_cast<int64_t>(q.slots.size()) - q.cached_len;
    ASSERT_EQ(static_cast<int64_t>(alloc_.num_free()) * ps_ + cache_.total_size() + request_tokens,
              static_cast<int64_t>(num_pages_) * ps_)
        << "pages leaked or double-owned";
  }

  // Runs num_ops operations checking the state after each, then finishes or aborts every request.
  // Returns false after a fatal failure (reported with the operation and the cache).
  bool run_ops(int num_ops) {
    for (int i = 0; i < num_ops; ++i) {
      step(rng_() % 100);
      if (!::testing::Test::HasFatalFailure()) check_state();
      if (::testing::Test::HasFatalFailure()) {
        ADD_FAILURE() << "failed at operation " << i << "; cache:\n" << cache_.to_string();
        return false;
      }
    }
    while (!reqs_.empty() && !::testing::Test::HasFatalFailure()) {
      rng_() % 2 ? cache_request(true) : abort_request();
    }
    return !::testing::Test::HasFatalFailure();
  }

  // Evicts what is left and checks that the cache, the reference and the allocator are empty.
  void evict_everything() {
    ASSERT_EQ(cache_.protected_size(), 0);
    checked_evict(cache_.total_size() + 1);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(cache_.total_size(), 0);
    ASSERT_TRUE(ref_.pages.empty());
    ASSERT_EQ(alloc_.num_free(), num_pages_);
  }

  // A prompt: often a cut of an earlier one (at a multiple of `boundary` half the time, moved by
  // -1, 0 or +1 with jitter), then 1 to tail_span random tokens from a small alphabet.
  Vec random_prompt(int32_t boundary, bool jitter, uint32_t tail_span, size_t max_len) {
    Vec t;
    if (!history_.empty() && rng_() % 5 != 0) {
      const Vec& base = history_[rng_() % history_.size()];
      int32_t cut = static_cast<int32_t>(rng_() % (base.size() + 1));
      if (rng_() % 2 == 0) {
        cut = cut / boundary * boundary;
        if (jitter) cut = std::clamp(cut + static_cast<int32_t>(rng_() % 3) - 1, 0, static_cast<int32_t>(base.size()));
      }
      t = head(base, cut);
    }
    const size_t target = std::min<size_t>(max_len, t.size() + 1 + rng_() % tail_span);
    while (t.size() < target) t.push_back(static_cast<int32_t>(rng_() % 3));
    return t;
  }

  void remember(const Vec& tokens) {
    if (history_.size() < 24) {
      history_.push_back(tokens);
    } else {
      history_[rng_() % history_.size()] = tokens;
    }
  }

  void free_slots(const Vec& slots) { alloc_.free(slots_to_pages(slots, ps_)); }

  // Allocates n pages, evicting from the cache on a shortage; nullopt when that is not enough.
  std::optional<Vec> alloc_pages(int32_t n) {
    if (auto pages = alloc_.alloc(n)) return pages;
    const int32_t free_before = alloc_.num_free();
    checked_evict(static_cast<int64_t>(n - free_before) * ps_);
    return alloc_.alloc(n);
  }

  // The cache's match of tokens, checked against the reference (length and slots).
  void checked_match(const Vec& tokens, MatchResult& m) {
    m = cache_.match_prefix(tokens);
    int32_t k = 0;
    reference_match(tokens, m, k);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(m.length(), k);
    ASSERT_EQ(m.slots, ref_.slots(tokens, k));
  }

  // A new request (at most 8 run at once) for random_tokens(): a checked match, then start_request
  // at resume_point(). Returns the cached tokens it reuses (0 also when it did not start).
  int32_t admit() {
    if (reqs_.size() >= 8) return 0;
    const Vec tokens = random_tokens();
    MatchResult m;
    checked_match(tokens, m);
    if (::testing::Test::HasFatalFailure()) return 0;
    const CacheHandle at = resume_point(m);
    return start_request(tokens, at, at.length, m.slots) ? at.length : 0;
  }

  // Admits a request that resumes at `handle` (k tokens, their slots cached_slots[0, k)): locks it
  // and allocates pages for the rest; without room it unlocks again. Returns whether it started.
  bool start_request(const Vec& tokens, const CacheHandle& handle, int32_t k, const Vec& cached_slots) {
    cache_.lock(handle);
    ref_.add_locks(tokens, k, +1);
    const int32_t n = static_cast<int32_t>(tokens.size());
    const auto pages = alloc_pages((n - k + ps_ - 1) / ps_);
    if (::testing::Test::HasFatalFailure()) return false;
    if (!pages) {
      cache_.unlock(handle);
      ref_.add_locks(tokens, k, -1);
      return false;
    }
    Request q;
    q.tokens = tokens;
    q.handle = handle;
    q.cached_len = k;
    q.slots = head(cached_slots, k);
    const Vec own = pages_to_slots(*pages, ps_);
    q.slots.insert(q.slots.end(), own.begin(), own.end());
    remember(q.tokens);
    reqs_.push_back(std::move(q));
    return true;
  }

  // Decode steps: appends 1 to step_span tokens (up to max_len) to a random request, filling its
  // last page before taking new ones.
  void extend(uint32_t step_span, size_t max_len) {
    if (reqs_.empty()) return;
    Request& q = reqs_[rng_() % reqs_.size()];
    const size_t new_len = std::min<size_t>(q.tokens.size() + 1 + rng_() % step_span, max_len);
    const int32_t have = static_cast<int32_t>(q.slots.size()) / ps_;
    const int32_t need = static_cast<int32_t>((new_len + static_cast<size_t>(ps_) - 1) / static_cast<size_t>(ps_));
    const auto pages = alloc_pages(std::max(0, need - have));
    if (!pages) return;
    const Vec own = pages_to_slots(*pages, ps_);
    q.slots.insert(q.slots.end(), own.begin(), own.end());
    while (q.tokens.size() < new_len) q.tokens.push_back(static_cast<int32_t>(rng_() % 3));
  }

  // The rest of the ownership contract after reqs_[idx]'s insert returned r for its first
  // `aligned` tokens: frees the duplicates; then finishes the request (unlock, free its own tail)
  // or moves its lock to the new handle and takes the cache's slots.
  void settle(size_t idx, const InsertResult& r, int32_t aligned, bool finish) {
    Request& q = reqs_[idx];
    ASSERT_GE(r.prefix_len, q.cached_len) << "a locked prefix disappeared";
    ASSERT_EQ(r.handle.length, aligned);
    duplicate_tokens_ += r.prefix_len - q.cached_len;
    free_slots(Vec(q.slots.begin() + q.cached_len, q.slots.begin() + r.prefix_len));
    if (finish) {
      cache_.unlock(q.handle);
      ref_.add_locks(q.tokens, q.cached_len, -1);
      free_slots(Vec(q.slots.begin() + aligned, q.slots.end()));
      remember(q.tokens);
      reqs_.erase(reqs_.begin() + static_cast<std::ptrdiff_t>(idx));
      return;
    }
    MatchResult m;
    checked_match(head(q.tokens, aligned), m);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_EQ(m.length(), aligned);
    ASSERT_EQ(m.handle, r.handle);
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

  // Checks KV slots that the cache freed (by any eviction) and removes their pages from the
  // reference: only cached whole pages, none locked, the rest still prefix-closed. The removed
  // pages go to `removed`.
  void remove_freed_pages(const Vec& freed, std::map<Vec, ReferencePages::Page>& removed) {
    std::unordered_map<int32_t, const Vec*> owner;
    for (const auto& [key, page] : ref_.pages) {
      for (const int32_t slot : page.slots) owner[slot] = &key;
    }
    std::map<Vec, int32_t> hits;
    for (const int32_t slot : freed) {
      const auto it = owner.find(slot);
      ASSERT_NE(it, owner.end()) << "evicted slot " << slot << " that was not cached";
      ++hits[*it->second];
    }
    for (const auto& [key, count] : hits) {
      ASSERT_EQ(count, ps_) << "eviction freed part of a page";
      ASSERT_EQ(ref_.pages.at(key).locks, 0) << "evicted a locked page";
    }
    for (const auto& [key, count] : hits) {
      const auto it = ref_.pages.find(key);
      removed.insert(*it);
      ref_.pages.erase(it);
    }
    for (const auto& [key, page] : ref_.pages) {
      if (key.size() > static_cast<size_t>(ps_)) {
        ASSERT_EQ(ref_.pages.count(head(key, static_cast<int32_t>(key.size()) - ps_)), 1u)
            << "eviction left a page without its parent";
      }
    }
  }

  // evict(n) checked: the pages' rules above, LRU (nothing freed is newer than an unlocked leaf
  // that stays), enough freed unless nothing evictable is left, and no more than needed.
  void checked_evict(int64_t n) {
    for (const auto& [key, page] : ref_.pages) locked_at_evict_ += page.locks > 0 ? 1 : 0;
    const Vec freed = cache_.evict(n);
    std::map<Vec, ReferencePages::Page> removed;
    remove_freed_pages(freed, removed);
    if (::testing::Test::HasFatalFailure()) return;
    uint64_t newest_evicted = 0;
    for (const auto& [key, page] : removed) newest_evicted = std::max(newest_evicted, page.last_access);
    int64_t newest_tokens = 0;  // tokens of the evicted pages last used at newest_evicted
    for (const auto& [key, page] : removed) newest_tokens += page.last_access == newest_evicted ? ps_ : 0;
    on_evicted(removed);
    if (::testing::Test::HasFatalFailure()) return;
    bool evictable_left = false;
    for (const auto& [key, page] : ref_.pages) {
      if (page.locks > 0 || !ref_.is_leaf(key)) continue;
      evictable_left = true;
      ASSERT_GE(page.last_access, newest_evicted) << "evicted a page used more recently than a kept leaf";
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
    evicted_tokens_ += got;
    free_slots(freed);
  }

  int32_t ps_;
  int32_t num_pages_;
  std::mt19937 rng_;
  PrefixCache& cache_;
  ReferencePages& ref_;
  PageAllocator alloc_;
  std::vector<Request> reqs_;
  std::vector<Vec> history_;
  // What the run exercised (a test asserts that it did).
  int64_t evicted_tokens_ = 0;
  int64_t duplicate_tokens_ = 0;
  int64_t locked_at_evict_ = 0;
};

// The ownership contract of prefix_cache.h, written once against the interface: a chain of
// admissions (sharing a system prompt), chunk caching and finishes must leak no page and free none
// twice with any implementation.
inline void run_contract_flow(PrefixCache& cache, uint32_t seed, int num_ops) {
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

}  // namespace rlm::radix_test
