// The prefix cache's observer (cache/cache_events.h): a mirror built only from the events equals the
// cache's content after every operation of a random workload (inserts sharing prefixes, splits,
// locks, LRU eviction, reset), for RadixCache and HybridRadixCache (snapshot eviction too); and the
// KV-event block hashes chain as documented in server/kv_events.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "cache/cache_events.h"
#include "cache/hybrid_radix_cache.h"
#include "cache/radix_cache.h"
#include "radix_test_util.h"
#include "server/kv_events.h"

namespace rlm {
namespace {

using Vec = std::vector<int32_t>;

// Node paths known from the events: path -> where the node's own tokens begin.
class Mirror : public CacheEventObserver {
 public:
  explicit Mirror(int32_t page_size) : page_size_(static_cast<size_t>(page_size)) {}
  void on_stored(std::span<const int32_t> path, size_t node_begin) override {
    const Vec p(path.begin(), path.end());
    ASSERT_LT(node_begin, p.size());
    if (node_begin > 0) {
      ASSERT_TRUE(covered(Vec(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(node_begin))))
          << "stored under a parent that is not cached";
    }
    ASSERT_TRUE(nodes_.emplace(p, node_begin).second) << "stored twice";
  }
  void on_removed(std::span<const int32_t> path, size_t node_begin) override {
    const Vec p(path.begin(), path.end());
    // Removed nodes are leaves: the mirror may know them as several stored nodes (splits are not
    // reported), all within [node_begin, end) of this path and with nothing below.
    const size_t first_page_end = node_begin + page_size_;
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      const Vec& q = it->first;
      const bool overlaps = q.size() >= first_page_end &&
                            std::equal(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(first_page_end), q.begin());
      if (overlaps) {
        ASSERT_LE(q.size(), p.size()) << "a removed node had cached children";
        ASSERT_TRUE(std::equal(q.begin(), q.end(), p.begin()));
        if (it->second < node_begin) {  // the stored node was split: its head stays cached
          const Vec head(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(node_begin));
          const size_t begin = it->second;
          it = nodes_.erase(it);
          nodes_.emplace(head, begin);
          continue;
        }
        it = nodes_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void on_cleared() override { nodes_.clear(); }

  // A cached prefix: some mirrored node path starts with it.
  bool covered(const Vec& prefix) const {
    auto it = nodes_.lower_bound(prefix);
    return it != nodes_.end() && it->first.size() >= prefix.size() &&
           std::equal(prefix.begin(), prefix.end(), it->first.begin());
  }
  int64_t total_tokens() const {
    int64_t n = 0;
    for (const auto& [p, b] : nodes_) n += static_cast<int64_t>(p.size() - b);
    return n;
  }
  const std::map<Vec, size_t>& nodes() const { return nodes_; }

 private:
  size_t page_size_;
  std::map<Vec, size_t> nodes_;
};

// The mirror holds exactly the cache's content: the same number of tokens, and every mirrored path
// matches whole.
void expect_same(PrefixCache& cache, const Mirror& mirror) {
  ASSERT_EQ(mirror.total_tokens(), cache.total_size());
  for (const auto& [path, begin] : mirror.nodes()) {
    ASSERT_EQ(cache.match_prefix(path).length(), static_cast<int32_t>(path.size()));
  }
  ASSERT_TRUE(cache.check_integrity().is_ok()) << cache.check_integrity().message();
}

void run_workload(PrefixCache& cache, Mirror& mirror, uint32_t seed, int ops) {
  std::mt19937 rng(seed);
  const int32_t ps = cache.page_size();
  int32_t next_slot = 0;
  std::vector<CacheHandle> locked;
  std::vector<Vec> seen;
  for (int op = 0; op < ops; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 5) {  // insert a sequence sharing a prefix with an earlier one
      Vec seq;
      if (!seen.empty() && rng() % 4 != 0) {
        const Vec& base = seen[rng() % seen.size()];
        seq.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % (base.size() + 1)));
      }
      const size_t extra = 1 + rng() % (4 * static_cast<size_t>(ps) + 3);
      for (size_t i = 0; i < extra; ++i) seq.push_back(static_cast<int32_t>(rng() % 3));
      Vec slots(seq.size());
      for (auto& s : slots) s = next_slot++;
      const InsertResult r = cache.insert(seq, slots);
      if (rng() % 3 == 0) {
        cache.lock(r.handle);
        locked.push_back(r.handle);
      }
      seen.push_back(seq);
    } else if (kind < 7 && !locked.empty()) {
      const size_t i = rng() % locked.size();
      cache.unlock(locked[i]);
      locked.erase(locked.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (kind < 9) {
      cache.evict(static_cast<int64_t>(rng() % 12));
      if (cache.mamba_align() > 0) cache.evict_mamba(static_cast<int64_t>(rng() % 3));
    } else if (locked.empty()) {
      cache.reset();
    }
    expect_same(cache, mirror);
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "seed " << seed << " op " << op;
      return;
    }
  }
  for (const CacheHandle& h : locked) cache.unlock(h);
}

TEST(CacheEvents, RadixCacheMirrorFollowsTheCache) {
  for (int32_t ps : {1, 2, 4}) {
    for (uint32_t seed = 0; seed < 3; ++seed) {
      RadixCache cache(ps);
      Mirror mirror(ps);
      cache.set_observer(&mirror);
      run_workload(cache, mirror, radix_test::base_seed(seed * 31 + static_cast<uint32_t>(ps)), 1500);
      ASSERT_FALSE(HasFatalFailure());
      cache.reset();
      EXPECT_EQ(mirror.total_tokens(), 0);
    }
  }
}

TEST(CacheEvents, HybridRadixCacheMirrorFollowsTheCache) {
  // Snapshots every 4 tokens; each insert of a 4-multiple offers one, so evict_mamba removes leaves too.
  for (uint32_t seed = 0; seed < 3; ++seed) {
    auto cache = make_prefix_cache("radix", 1, 4, [](int32_t) {});
    ASSERT_TRUE(cache.is_ok());
    Mirror mirror(1);
    (*cache)->set_observer(&mirror);
    std::mt19937 rng(radix_test::base_seed(seed));
    int32_t next_slot = 0, next_mamba = 0;
    for (int op = 0; op < 800; ++op) {
      if (rng() % 3 != 0) {
        Vec seq(4 * (1 + rng() % 4));
        for (auto& t : seq) t = static_cast<int32_t>(rng() % 2);
        Vec slots(seq.size());
        for (auto& s : slots) s = next_slot++;
        (*cache)->insert_with_snapshot(seq, slots, next_mamba++);
      } else {
        (*cache)->evict_mamba(1 + rng() % 2);
        (*cache)->evict(static_cast<int64_t>(rng() % 6));
      }
      expect_same(**cache, mirror);
      ASSERT_FALSE(HasFatalFailure()) << "seed " << seed << " op " << op;
    }
  }
}

TEST(CacheEvents, NoObserverNoCalls) {
  RadixCache cache(1);
  Mirror mirror(1);
  cache.set_observer(&mirror);
  cache.insert(Vec{1, 2, 3}, Vec{0, 1, 2});
  cache.set_observer(nullptr);
  cache.insert(Vec{4, 5}, Vec{3, 4});
  EXPECT_EQ(mirror.total_tokens(), 3);
  EXPECT_EQ(cache.total_size(), 5);
}

// FNV-1a-64 over le64(parent) then le32 tokens, written out bytewise here.
uint64_t reference_hash(uint64_t parent, const Vec& block) {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(parent >> (8 * i)));
  for (int32_t t : block) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(static_cast<uint32_t>(t) >> (8 * i)));
  }
  uint64_t h = 14695981039346656037ULL;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 1099511628211ULL;
  }
  return h;
}

TEST(CacheEvents, BlockHashesChainOverPages) {
  const Vec path = {5, 6, 7, 8, 9, 10};
  const BlockHashes all = kv_block_hashes(path, 0, 2);
  ASSERT_EQ(all.hashes.size(), 3u);
  EXPECT_EQ(all.parent, 0u);
  uint64_t h = 0;
  for (size_t b = 0; b < 3; ++b) {
    h = reference_hash(h, Vec(path.begin() + static_cast<std::ptrdiff_t>(2 * b), path.begin() + static_cast<std::ptrdiff_t>(2 * b + 2)));
    EXPECT_EQ(all.hashes[b], h) << b;
  }
  const BlockHashes tail = kv_block_hashes(path, 4, 2);
  EXPECT_EQ(tail.parent, all.hashes[1]);
  EXPECT_EQ(tail.hashes, std::vector<uint64_t>{all.hashes[2]});
  EXPECT_THROW(kv_block_hashes(path, 1, 2), Error);
}

}  // namespace
}  // namespace rlm
