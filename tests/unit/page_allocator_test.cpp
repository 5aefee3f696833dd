// PageAllocator: random alloc/free against a reference set of owned pages.
#include "cache/page_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"

namespace rlm {
namespace {

uint32_t base_seed() {
  const char* env = std::getenv("RADIXLM_TEST_SEED");
  return env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 20261122u;
}

TEST(PageAllocator, StartsFullyFreeAndHandsOutDistinctPages) {
  PageAllocator alloc(8);
  EXPECT_EQ(alloc.num_free(), 8);
  EXPECT_EQ(alloc.num_total(), 8);
  auto pages = alloc.alloc(8);
  ASSERT_TRUE(pages.has_value());
  std::set<int32_t> distinct(pages->begin(), pages->end());
  EXPECT_EQ(distinct.size(), 8u);
  EXPECT_EQ(*distinct.begin(), 0);
  EXPECT_EQ(*distinct.rbegin(), 7);
  EXPECT_EQ(alloc.num_free(), 0);
  EXPECT_TRUE(alloc.alloc(0).has_value());
  EXPECT_FALSE(alloc.alloc(1).has_value());
}

TEST(PageAllocator, FailedAllocLeavesStateUnchanged) {
  PageAllocator alloc(5);
  auto a = alloc.alloc(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_FALSE(alloc.alloc(3).has_value());
  EXPECT_EQ(alloc.num_free(), 2);
  for (int32_t p = 0; p < 5; ++p) {
    const bool owned = std::find(a->begin(), a->end(), p) != a->end();
    EXPECT_EQ(alloc.is_allocated(p), owned) << "page " << p;
  }
  auto b = alloc.alloc(2);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(alloc.num_free(), 0);
}

TEST(PageAllocator, BadFreesThrowAndFreeNothing) {
  PageAllocator alloc(4);
  auto a = alloc.alloc(2);
  ASSERT_TRUE(a.has_value());
  const int32_t p0 = (*a)[0], p1 = (*a)[1];
  int32_t unallocated = 0;
  while (alloc.is_allocated(unallocated)) ++unallocated;

  EXPECT_THROW(alloc.free(std::vector<int32_t>{p0, 4}), Error);          // out of range
  EXPECT_THROW(alloc.free(std::vector<int32_t>{p0, -1}), Error);         // negative
  EXPECT_THROW(alloc.free(std::vector<int32_t>{p0, unallocated}), Error);  // never allocated
  EXPECT_THROW(alloc.free(std::vector<int32_t>{p0, p1, p0}), Error);     // repeated in one call
  EXPECT_EQ(alloc.num_free(), 2);
  EXPECT_TRUE(alloc.is_allocated(p0));
  EXPECT_TRUE(alloc.is_allocated(p1));

  alloc.free(std::vector<int32_t>{p1, p0});
  EXPECT_EQ(alloc.num_free(), 4);
  EXPECT_THROW(alloc.free(std::vector<int32_t>{p0}), Error);  // double free
  EXPECT_EQ(alloc.num_free(), 4);
  EXPECT_THROW(alloc.alloc(-1), Error);
  EXPECT_THROW(PageAllocator(-1), Error);
}

TEST(PageAllocator, RandomAllocFreeNeverHandsOutAPageTwice) {
  for (uint32_t round = 0; round < 8; ++round) {
    const uint32_t seed = base_seed() + round;
    SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with RADIXLM_TEST_SEED)");
    std::mt19937 rng(seed);
    const int32_t num_pages = 1 + static_cast<int32_t>(rng() % 64);
    PageAllocator alloc(num_pages);
    std::set<int32_t> owned;                   // reference: pages handed out and not yet freed
    std::vector<std::vector<int32_t>> groups;  // in the grouping they were handed out
    for (int step = 0; step < 4000; ++step) {
      if (rng() % 2 == 0) {
        const int32_t n = static_cast<int32_t>(rng() % 9);
        const int32_t free_before = alloc.num_free();
        auto pages = alloc.alloc(n);
        if (n > free_before) {
          ASSERT_FALSE(pages.has_value());
          ASSERT_EQ(alloc.num_free(), free_before);
        } else {
          ASSERT_TRUE(pages.has_value());
          ASSERT_EQ(static_cast<int32_t>(pages->size()), n);
          for (const int32_t p : *pages) {
            ASSERT_TRUE(p >= 0 && p < num_pages) << p;
            ASSERT_TRUE(owned.insert(p).second) << "page " << p << " handed out twice";
            ASSERT_TRUE(alloc.is_allocated(p));
          }
          if (n > 0) groups.push_back(std::move(*pages));
        }
      } else if (!groups.empty()) {
        const size_t g = rng() % groups.size();
        std::vector<int32_t> pages = std::move(groups[g]);
        groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(g));
        // Free a random part now and keep the rest as a new group.
        std::shuffle(pages.begin(), pages.end(), rng);
        const size_t k = 1 + rng() % pages.size();
        std::vector<int32_t> now(pages.begin(), pages.begin() + static_cast<std::ptrdiff_t>(k));
        std::vector<int32_t> later(pages.begin() + static_cast<std::ptrdiff_t>(k), pages.end());
        alloc.free(now);
        for (const int32_t p : now) {
          owned.erase(p);
          ASSERT_FALSE(alloc.is_allocated(p));
        }
        if (!later.empty()) groups.push_back(std::move(later));
        if (rng() % 8 == 0) {  // a double free must throw and change nothing
          const int32_t free_before = alloc.num_free();
          EXPECT_THROW(alloc.free(std::vector<int32_t>{now[0]}), Error);
          ASSERT_EQ(alloc.num_free(), free_before);
        }
      }
      ASSERT_EQ(alloc.num_free() + static_cast<int32_t>(owned.size()), num_pages);
      ASSERT_EQ(alloc.num_used(), static_cast<int32_t>(owned.size()));
    }
  }
}

TEST(PageAllocator, PagesToSlotsRoundTrip) {
  const std::vector<int32_t> pages = {3, 0, 7};
  const std::vector<int32_t> slots = pages_to_slots(pages, 4);
  ASSERT_EQ(slots.size(), 12u);
  for (size_t i = 0; i < pages.size(); ++i) {
    for (int32_t j = 0; j < 4; ++j) EXPECT_EQ(slots[i * 4 + static_cast<size_t>(j)], pages[i] * 4 + j);
  }
  EXPECT_EQ(slots_to_pages(slots, 4), pages);
  EXPECT_EQ(slots_to_pages(pages_to_slots(pages, 1), 1), pages);
  EXPECT_THROW(slots_to_pages(std::vector<int32_t>{4, 5, 6}, 4), Error);      // not whole pages
  EXPECT_THROW(slots_to_pages(std::vector<int32_t>{4, 5, 7, 6}, 4), Error);   // out of order
  EXPECT_THROW(slots_to_pages(std::vector<int32_t>{5, 6, 7, 8}, 4), Error);   // misaligned
}

}  // namespace
}  // namespace rlm
