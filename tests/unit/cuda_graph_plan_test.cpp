// The device-independent parts of the CUDA-graph and memory planning: which batch sizes are
// captured, which graph a batch is padded to, how many KV pages a memory fraction buys, and the
// host-side slot validation of req_to_token that lets the device skip synchronising checks.
#include <gtest/gtest.h>

#include "cache/kv_pool.h"
#include "core/check.h"
#include "engine/cuda_graph_runner.h"
#include "engine/model_runner.h"

namespace rlm {
namespace {

TEST(CudaGraphPlan, BatchSizesFollowSglang) {
  EXPECT_EQ(cuda_graph_batch_sizes(0), std::vector<int64_t>{});
  EXPECT_EQ(cuda_graph_batch_sizes(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(cuda_graph_batch_sizes(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(cuda_graph_batch_sizes(8), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(cuda_graph_batch_sizes(30), (std::vector<int64_t>{1, 2, 4, 8, 16, 24, 30}));
  const std::vector<int64_t> s160 = cuda_graph_batch_sizes(160);
  ASSERT_EQ(s160.size(), 23u);  // 1, 2, 4 and 8, 16, ..., 160
  for (size_t i = 3; i < s160.size(); ++i) EXPECT_EQ(s160[i], static_cast<int64_t>(8 * (i - 2)));
}

TEST(CudaGraphPlan, PadsToTheNextCapturedSize) {
  const std::vector<int64_t> sizes = cuda_graph_batch_sizes(32);
  // Reference: the smallest captured size >= bs, by a linear scan.
  for (int64_t bs = 1; bs <= 40; ++bs) {
    int64_t want = -1;
    for (int64_t s : sizes) {
      if (s >= bs) {
        want = s;
        break;
      }
    }
    EXPECT_EQ(padded_batch_size(sizes, bs), want) << "bs " << bs;
  }
  EXPECT_EQ(padded_batch_size(sizes, 3), 4);
  EXPECT_EQ(padded_batch_size(sizes, 5), 8);
  EXPECT_EQ(padded_batch_size(sizes, 33), -1);
}

TEST(CudaGraphPlan, KvPagesForMemory) {
  const size_t gib = size_t{1} << 30;
  // 80 GiB device, 16 GiB used by the weights, 0.88: 70.4 - 16 = 54.4 GiB for 2 MiB pages.
  const size_t page = size_t{2} << 20;
  const double budget = 80.0 * 0.88 - 16.0;
  EXPECT_EQ(kv_pages_for_memory(80 * gib, 16 * gib, 0.88, page, 0),
            static_cast<int64_t>(budget * static_cast<double>(gib) / static_cast<double>(page)));
  EXPECT_EQ(kv_pages_for_memory(80 * gib, 16 * gib, 0.88, page, gib),
            static_cast<int64_t>((budget - 1.0) * static_cast<double>(gib) / static_cast<double>(page)));
  EXPECT_EQ(kv_pages_for_memory(80 * gib, 75 * gib, 0.88, page, 0), 0);  // the weights already exceed F
  EXPECT_THROW((void)kv_pages_for_memory(80 * gib, 0, 0.5, 0, 0), Error);
}

TEST(ReqToTokenPoolSlots, SlotLimitRejectsBadSlotsOnTheHost) {
  ReqToTokenPool pool(2, 8);
  const int32_t r = pool.alloc();
  pool.set_slot_limit(16);
  pool.write(r, 0, {0, 15, 3});
  EXPECT_EQ(pool.read(r, 0, 3), (std::vector<int32_t>{0, 15, 3}));
  try {
    pool.write(r, 3, {4, 16});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 4: KV slot 16 is outside the pool [0, 16)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pool.write(r, 0, {-1}), Error);
  EXPECT_EQ(pool.num_pending_writes(), 0);  // no device mirror on the CPU
  pool.sync_device();                        // a no-op without one
  EXPECT_TRUE(pool.device_table().device().is_cpu());
}

}  // namespace
}  // namespace rlm
