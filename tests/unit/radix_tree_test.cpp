// RadixTree on its own, with a test payload: walk/split/insert, the payload's split hook, path
// stamps, locks and sizes, LRU eviction order, handle generations, clear, and check_integrity()
// catching each kind of corrupted state. The caches built on it are tested in radix_cache_test and
// hybrid_radix_cache_test.
#include "cache/radix_tree.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "radix_test_util.h"

namespace rlm {

// Reaches into the tree to corrupt it (declared a friend by RadixTreeBase).
class RadixTreeTestPeer {
 public:
  static std::vector<int32_t>& key(RadixTreeBase& t, int32_t id) { return t.at(id).key; }
  static int32_t& parent(RadixTreeBase& t, int32_t id) { return t.at(id).parent; }
  static int32_t& lock_ref(RadixTreeBase& t, int32_t id) { return t.at(id).lock_ref; }
  static uint64_t& last_access(RadixTreeBase& t, int32_t id) { return t.at(id).last_access; }
  static uint32_t& generation(RadixTreeBase& t, int32_t id) { return t.at(id).generation; }
  static std::unordered_multimap<uint64_t, int32_t>& children(RadixTreeBase& t, int32_t id) {
    return t.at(id).children;
  }
  static uint64_t page_hash(const RadixTreeBase& t, std::span<const int32_t> page) { return t.page_hash(page); }
  static int64_t& evictable(RadixTreeBase& t) { return t.evictable_size_; }
  static int64_t& protected_tokens(RadixTreeBase& t) { return t.protected_size_; }
  static int32_t& num_live(RadixTreeBase& t) { return t.num_live_nodes_; }
  static std::vector<int32_t>& free_ids(RadixTreeBase& t) { return t.free_ids_; }
};

namespace {

using radix_test::Vec;
using Peer = RadixTreeTestPeer;

// A payload that records which token positions a node holds (values) and a tag that a split
// leaves with the lower part, so that the tests see what split_into moved.
struct Tagged {
  Vec values;
  int32_t tag = -1;
  void split_into(Tagged& upper, int32_t offset) {
    upper.values.assign(values.begin(), values.begin() + offset);
    values.erase(values.begin(), values.begin() + offset);
  }
};
using Tree = RadixTree<Tagged>;

// Adds tokens below what the tree already matches (as a cache's insert does): the new leaf's
// payload holds the token positions [matched, aligned) and the given tag. Returns (node, depth).
std::pair<int32_t, int32_t> insert(Tree& tree, const Vec& tokens, int32_t tag) {
  const uint64_t tick = tree.tick();
  const RadixTreeBase::WalkResult w = tree.walk(tokens, tick);
  const int32_t aligned = static_cast<int32_t>(tokens.size()) / tree.page_size() * tree.page_size();
  if (w.length == aligned) return {w.node, w.length};
  const int32_t id = tree.add_leaf(w.node, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(w.length),
                                                                                   static_cast<size_t>(aligned - w.length)),
                                   tick);
  tree.payload(id).values = radix_test::iota_vec(aligned - w.length, w.length);
  tree.payload(id).tag = tag;
  return {id, aligned};
}

void expect_ok(const Tree& tree) {
  const Status st = tree.check_integrity();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
}

TEST(RadixTree, WalkSplitsWhereTheMatchEndsInsideANodeAndMovesThePayloadHead) {
  Tree tree(2, "TestTree");
  const auto [leaf, depth] = insert(tree, Vec{1, 2, 3, 4, 5, 6, 7, 8, 9}, 7);  // the odd last token stays out
  EXPECT_EQ(depth, 8);
  EXPECT_EQ(tree.num_nodes(), 2);
  EXPECT_EQ(tree.evictable_size(), 8);
  const CacheHandle before = tree.handle_of(leaf, depth);

  const RadixTreeBase::WalkResult w = tree.walk(Vec{1, 2, 3, 4, 5, 0}, tree.tick());  // mismatch inside page 3
  EXPECT_EQ(w.length, 4);
  EXPECT_EQ(tree.num_nodes(), 3);
  const int32_t upper = w.node;
  EXPECT_NE(upper, leaf);
  EXPECT_EQ(tree.parent(leaf), upper);
  EXPECT_EQ(tree.parent(upper), RadixTreeBase::kRoot);
  EXPECT_EQ(Vec(tree.key(upper).begin(), tree.key(upper).end()), (Vec{1, 2, 3, 4}));
  EXPECT_EQ(Vec(tree.key(leaf).begin(), tree.key(leaf).end()), (Vec{5, 6, 7, 8}));
  EXPECT_EQ(tree.payload(upper).values, (Vec{0, 1, 2, 3}));
  EXPECT_EQ(tree.payload(upper).tag, -1);  // the upper payload starts fresh
  EXPECT_EQ(tree.payload(leaf).values, (Vec{4, 5, 6, 7}));
  EXPECT_EQ(tree.payload(leaf).tag, 7);
  EXPECT_EQ(tree.evictable_size(), 8);  // a split changes no size
  tree.check_handle(before, "lock");    // the original id kept its depth and generation
  EXPECT_EQ(tree.depth(leaf), 8);
  expect_ok(tree);

  // A walk that ends on a node boundary, or covers a node only partly in its last partial page,
  // splits nothing.
  EXPECT_EQ(tree.walk(Vec{1, 2, 3, 4}, tree.tick()).node, upper);
  EXPECT_EQ(tree.walk(Vec{1, 2, 3, 4, 5}, tree.tick()).length, 4);
  EXPECT_EQ(tree.walk(Vec{1, 2, 3, 4, 5, 6, 7, 8, 1, 1}, tree.tick()).node, leaf);
  EXPECT_EQ(tree.num_nodes(), 3);
  // A different first page: no match at all.
  EXPECT_EQ(tree.walk(Vec{1, 3}, tree.tick()).length, 0);
  expect_ok(tree);
}

TEST(RadixTree, InsertBranchesBelowTheSharedPrefix) {
  Tree tree(1, "TestTree");
  insert(tree, Vec{1, 2, 3}, 0);
  const auto [b, depth_b] = insert(tree, Vec{1, 2, 9, 9}, 1);
  EXPECT_EQ(depth_b, 4);
  EXPECT_EQ(tree.num_nodes(), 4);  // root, [1 2], [3], [9 9]
  EXPECT_EQ(tree.payload(b).values, (Vec{2, 3}));
  EXPECT_EQ(tree.depth(tree.parent(b)), 2);
  EXPECT_TRUE(tree.is_leaf(b));
  EXPECT_FALSE(tree.is_leaf(tree.parent(b)));
  EXPECT_EQ(tree.evictable_size(), 5);
  // Inserting what is there adds nothing.
  EXPECT_EQ(insert(tree, Vec{1, 2, 9, 9}, 2), std::make_pair(b, 4));
  EXPECT_EQ(tree.num_nodes(), 4);
  expect_ok(tree);
}

TEST(RadixTree, AWalkStampsItsWholePathAndOnlyIt) {
  Tree tree(1, "TestTree");
  const auto [a, da] = insert(tree, Vec{1, 2, 3}, 0);
  const auto [b, db] = insert(tree, Vec{1, 2, 4}, 0);
  const int32_t shared = tree.parent(a);
  const uint64_t tick = tree.tick();
  EXPECT_EQ(tree.clock(), tick);
  tree.walk(Vec{1, 2, 3}, tick);
  EXPECT_EQ(tree.last_access(a), tick);
  EXPECT_EQ(tree.last_access(shared), tick);
  EXPECT_LT(tree.last_access(b), tick);
  expect_ok(tree);
}

TEST(RadixTree, LocksProtectThePathAndMoveTokensBetweenTheSizes) {
  Tree tree(2, "TestTree");
  const auto [a, da] = insert(tree, Vec{1, 1, 2, 2}, 0);
  const auto [b, db] = insert(tree, Vec{1, 1, 3, 3, 4, 4}, 0);
  const int32_t shared = tree.parent(a);
  const CacheHandle hb = tree.handle_of(b, db);
  tree.lock(hb);
  tree.lock(hb);
  EXPECT_EQ(tree.lock_ref(b), 2);
  EXPECT_EQ(tree.lock_ref(shared), 2);
  EXPECT_EQ(tree.lock_ref(a), 0);
  EXPECT_EQ(tree.protected_size(), 6);
  EXPECT_EQ(tree.evictable_size(), 2);
  tree.lock(tree.handle_of(a, da));
  EXPECT_EQ(tree.lock_ref(shared), 3);
  EXPECT_EQ(tree.protected_size(), 8);
  // A split inside the locked node copies its count: both halves stay protected.
  tree.walk(Vec{1, 1, 3, 3, 0, 0}, tree.tick());
  EXPECT_EQ(tree.lock_ref(tree.parent(b)), 2);
  EXPECT_EQ(tree.protected_size(), 8);
  expect_ok(tree);
  tree.unlock(hb);
  tree.unlock(hb);
  tree.unlock(tree.handle_of(a, da));
  EXPECT_EQ(tree.protected_size(), 0);
  EXPECT_EQ(tree.evictable_size(), 8);
  EXPECT_THROW(tree.unlock(hb), Error);  // more unlocks than locks
  tree.lock(CacheHandle{});              // the root: always valid, never counted
  tree.unlock(CacheHandle{});
  EXPECT_EQ(tree.protected_size(), 0);
  CacheHandle wrong = hb;
  wrong.length = 4;
  EXPECT_THROW(tree.lock(wrong), Error);
  expect_ok(tree);
}

TEST(RadixTree, EvictsUnlockedLeavesOldestFirstAndParentsAfterTheirChildren) {
  Tree tree(1, "TestTree");
  const auto [a, da] = insert(tree, Vec{1, 2, 3}, 10);
  const auto [b, db] = insert(tree, Vec{1, 2, 4}, 11);  // splits [1 2 3]: [1 2] + [3], [4]
  const auto [c, dc] = insert(tree, Vec{5, 5}, 12);
  const int32_t shared = tree.parent(a);
  const auto [d, dd] = insert(tree, Vec{6}, 13);
  tree.walk(Vec{1, 2, 3}, tree.tick());  // a (and [1 2]) now newer than c and d; b is the oldest
  tree.lock(tree.handle_of(d, dd));
  std::vector<int32_t> order;
  std::vector<int32_t> tags;
  auto record = [&](int32_t id) {
    order.push_back(id);
    tags.push_back(tree.payload(id).tag);  // the payload is still there when on_evict runs
  };
  EXPECT_EQ(tree.evict_lru(1, record), 1);  // b only: one leaf is enough
  EXPECT_EQ(order, (std::vector<int32_t>{b}));
  EXPECT_EQ(tags, (std::vector<int32_t>{11}));
  EXPECT_EQ(tree.evict_lru(0, record), 0);
  EXPECT_EQ(tree.evict_lru(-3, record), 0);
  // Then c, a, and [1 2] once it became a leaf; d is locked.
  EXPECT_EQ(tree.evict_lru(100, record), 5);
  EXPECT_EQ(order, (std::vector<int32_t>{b, c, a, shared}));
  EXPECT_EQ(tags, (std::vector<int32_t>{11, 12, 10, -1}));
  EXPECT_EQ(tree.num_nodes(), 2);
  EXPECT_EQ(tree.evictable_size(), 0);
  EXPECT_EQ(tree.protected_size(), 1);
  expect_ok(tree);
}

TEST(RadixTree, EqualTicksEvictInIdOrder) {
  Tree tree(1, "TestTree");
  std::vector<int32_t> ids;
  for (const int32_t t : {4, 3, 2, 1}) ids.push_back(insert(tree, Vec{t}, 0).first);
  const uint64_t tick = tree.tick();
  for (const int32_t t : {1, 2, 3, 4}) tree.walk(Vec{t}, tick);  // one tick for all
  std::vector<int32_t> order;
  tree.evict_lru(4, [&](int32_t id) { order.push_back(id); });
  EXPECT_EQ(order, (std::vector<int32_t>{ids[0], ids[1], ids[2], ids[3]}));
}

TEST(RadixTree, AFreedIdComesBackWithANewGenerationAndAFreshPayload) {
  Tree tree(1, "TestTree");
  const auto [a, da] = insert(tree, Vec{1, 2}, 5);
  const CacheHandle old = tree.handle_of(a, da);
  tree.remove_leaf(a);
  EXPECT_FALSE(tree.is_live(a));
  EXPECT_THROW(tree.lock(old), Error);
  try {
    tree.check_handle(old, "lock");
    ADD_FAILURE() << "a stale handle passed check_handle";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TestTree::lock: stale or invalid handle"), std::string::npos) << e.what();
  }
  const auto [b, db] = insert(tree, Vec{3}, -1);
  EXPECT_EQ(b, a);  // the arena reuses the id
  EXPECT_EQ(tree.payload(b).values, (Vec{0}));
  EXPECT_EQ(tree.payload(b).tag, -1);
  const CacheHandle fresh = tree.handle_of(b, db);
  EXPECT_NE(fresh.generation, old.generation);
  EXPECT_THROW(tree.unlock(CacheHandle{b, old.generation, 1}), Error);
  tree.lock(fresh);
  tree.unlock(fresh);
  EXPECT_THROW(tree.lock(CacheHandle{99, 0, 0}), Error);  // never allocated
  EXPECT_THROW(tree.lock(CacheHandle{-1, 0, 0}), Error);
  expect_ok(tree);
}

TEST(RadixTree, ClearRemovesEverythingButTheRootAndNeedsNoLocks) {
  Tree tree(2, "TestTree");
  const auto [a, da] = insert(tree, Vec{1, 1, 2, 2}, 0);
  insert(tree, Vec{1, 1, 3, 3}, 0);
  insert(tree, Vec{4, 4}, 0);
  tree.lock(tree.handle_of(a, da));
  EXPECT_THROW(tree.clear([](int32_t) {}, "reset"), Error);
  EXPECT_EQ(tree.num_nodes(), 5);
  tree.unlock(tree.handle_of(a, da));
  int32_t removed = 0;
  int64_t values = 0;
  tree.clear(
      [&](int32_t id) {
        ++removed;
        values += static_cast<int64_t>(tree.payload(id).values.size());
      },
      "reset");
  EXPECT_EQ(removed, 4);
  EXPECT_EQ(values, 8);
  EXPECT_EQ(tree.num_nodes(), 1);
  EXPECT_EQ(tree.evictable_size(), 0);
  EXPECT_EQ(tree.walk(Vec{1, 1}, tree.tick()).length, 0);
  EXPECT_THROW(tree.lock(tree.handle_of(a, da)), Error);
  expect_ok(tree);
}

TEST(RadixTree, DumpIsDeterministicAndCarriesThePayload) {
  Tree tree(1, "TestTree");
  insert(tree, Vec{2, 2}, 0);
  insert(tree, Vec{1, 1}, 0);
  const std::string dump = tree.to_string("HEADER", [&](int32_t id, std::ostream& os) { os << " tag=" << tree.payload(id).tag + 40; });
  EXPECT_EQ(dump.rfind("HEADER\n", 0), 0u);
  EXPECT_LT(dump.find("[1 1]"), dump.find("[2 2]"));  // children in key order
  EXPECT_NE(dump.find("tag=40"), std::string::npos);
}

// The eviction queue against a sorted reference: random stamps with many ties, pushes interleaved
// with pops (as when a parent joins during eviction).
TEST(LruQueue, PopsByStampThenId) {
  std::mt19937 rng(radix_test::base_seed(7u));
  for (int round = 0; round < 50; ++round) {
    LruQueue queue;
    std::set<std::pair<uint64_t, int32_t>> reference;
    int32_t next_id = 0;
    for (int op = 0; op < 200; ++op) {
      if (rng() % 3 != 0 || reference.empty()) {
        const uint64_t stamp = rng() % 16;
        const int32_t id = (next_id++ * 7919) % 1000;  // ids out of order, each once
        queue.push(stamp, id);
        reference.emplace(stamp, id);
      } else {
        ASSERT_FALSE(queue.empty());
        ASSERT_EQ(queue.pop(), reference.begin()->second);
        reference.erase(reference.begin());
      }
    }
    while (!reference.empty()) {
      ASSERT_EQ(queue.pop(), reference.begin()->second);
      reference.erase(reference.begin());
    }
    EXPECT_TRUE(queue.empty());
  }
}

TEST(RadixTree, RejectsABadPageSize) { EXPECT_THROW(Tree(0, "TestTree"), Error); }

// Each corruption of a healthy tree (root, [1 1 2 2] split into [1 1] + [2 2], [1 1 3 3]'s [3 3],
// [5 5]; page size 2, one lock on [1 1 3 3]) is reported by check_integrity with its own message.
TEST(RadixTree, IntegrityCheckCatchesEachKindOfCorruption) {
  struct Nodes {
    int32_t shared, a, b, c;
  };
  struct Case {
    const char* what;
    void (*corrupt)(Tree&, const Nodes&);
  };
  const Case cases[] = {
      {"the root must be", [](Tree& t, const Nodes&) { Peer::key(t, RadixTreeBase::kRoot) = {1, 1}; }},
      {"names parent", [](Tree& t, const Nodes& n) { Peer::parent(t, n.c) = n.shared; }},
      {"dead or invalid child",
       [](Tree& t, const Nodes& n) { Peer::children(t, n.shared).begin()->second = 77; }},
      {"is keyed by a hash", [](Tree& t, const Nodes& n) { Peer::key(t, n.c) = {6, 6}; }},
      {"two children with the same first page",
       [](Tree& t, const Nodes& n) {
         // c's first page becomes shared's, listed under the matching hash: two children, one page.
         Peer::key(t, n.c) = {1, 1};
         auto& kids = Peer::children(t, RadixTreeBase::kRoot);
         for (auto it = kids.begin(); it != kids.end(); ++it) {
           if (it->second == n.c) {
             kids.erase(it);
             break;
           }
         }
         kids.emplace(Peer::page_hash(t, Vec{1, 1}), n.c);
       }},
      {"< sum of its children's", [](Tree& t, const Nodes& n) { Peer::lock_ref(t, n.shared) = 0; }},
      {"was used after its parent", [](Tree& t, const Nodes& n) { Peer::last_access(t, n.a) = t.clock(); Peer::last_access(t, n.shared) = 0; }},
      {"used in the future", [](Tree& t, const Nodes& n) { Peer::last_access(t, n.c) = t.clock() + 1; }},
      {"not a positive multiple of page_size", [](Tree& t, const Nodes& n) { Peer::key(t, n.c).push_back(5); }},
      {"is not listed by its parent",
       [](Tree& t, const Nodes& n) {
         Peer::children(t, RadixTreeBase::kRoot).clear();
         Peer::children(t, n.shared).emplace(Peer::page_hash(t, Vec{5, 5}), n.c);
         Peer::parent(t, n.c) = n.shared;
         Peer::parent(t, n.shared) = RadixTreeBase::kRoot;
       }},
      {"live nodes, counter says", [](Tree& t, const Nodes&) { ++Peer::num_live(t); }},
      {"free id list is out of sync", [](Tree& t, const Nodes&) { Peer::free_ids(t).push_back(3); }},
      {"is on the free list",
       [](Tree& t, const Nodes& n) {
         // A live node on the free list, with the counts kept consistent otherwise.
         t.evict_lru(1, [](int32_t) {});  // frees c's id, the oldest unlocked leaf
         ASSERT_FALSE(t.is_live(n.c));
         Peer::free_ids(t).back() = n.a;
       }},
      {"sizes: evictable", [](Tree& t, const Nodes&) { Peer::evictable(t) += 2; }},
      {"protected", [](Tree& t, const Nodes&) { Peer::protected_tokens(t) -= 2; }},
      {"the root must be", [](Tree& t, const Nodes&) { Peer::generation(t, RadixTreeBase::kRoot) = 1; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Tree tree(2, "TestTree");
    Nodes n{};
    n.a = insert(tree, Vec{1, 1, 2, 2}, 0).first;
    const auto [b, db] = insert(tree, Vec{1, 1, 3, 3}, 0);
    n.b = b;
    n.shared = tree.parent(n.a);
    n.c = insert(tree, Vec{5, 5}, 0).first;
    tree.lock(tree.handle_of(b, db));
    tree.walk(Vec{1, 1, 2, 2}, tree.tick());
    ASSERT_TRUE(tree.check_integrity().is_ok());
    c.corrupt(tree, n);
    const Status st = tree.check_integrity();
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
    EXPECT_EQ(st.message().rfind("TestTree integrity: ", 0), 0u) << st.message();
  }
}

// A detached subtree whose links agree with each other (a -> b -> a) passes every per-node check;
// only the walk from the root finds it.
TEST(RadixTree, IntegrityCheckFindsNodesUnreachableFromTheRoot) {
  Tree tree(1, "TestTree");
  const int32_t a = insert(tree, Vec{1, 2}, 0).first;
  const int32_t b = insert(tree, Vec{1, 2, 3}, 0).first;
  ASSERT_EQ(tree.parent(b), a);
  Peer::children(tree, RadixTreeBase::kRoot).clear();
  Peer::parent(tree, a) = b;
  Peer::children(tree, b).emplace(Peer::page_hash(tree, Vec{1}), a);
  const Status st = tree.check_integrity();
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("2 live nodes are unreachable from the root"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace rlm
