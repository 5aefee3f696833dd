// ops::apply_token_bitmask on CUDA against its CPU twin on fresh random inputs: odd vocab sizes
// (Llama-3's 128256 among them), extra mask words, 0 to all rows masked in any order, masks with
// few, most and all bits set, logits rows with a stride wider than the vocab. The result must be
// bit-identical (the op only writes -inf). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cuda/cuda_test_util.h"
#include "ops/sampling_ops.h"

namespace rlm {
namespace {

using testing::random_normal;
using testing::TestRng;
using testing::to_cpu;
using testing::to_gpu;

TEST(TokenBitmaskCuda, BitIdenticalToCpu) {
  RLM_REQUIRE_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (const int64_t vocab : {1, 33, 1000, 32000, 128256, 151936}) {
    for (int trial = 0; trial < 3; ++trial) {
      const int64_t n = rng.randint(1, 130), pad = rng.randint(0, 1) * 7;
      const int64_t w = (vocab + 31) / 32 + rng.randint(0, 2);
      Tensor wide = random_normal(rng, {n, vocab + pad});
      Tensor logits = wide.slice(1, 0, vocab);  // row stride vocab + pad
      std::vector<int32_t> order(static_cast<size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng.gen());
      const int64_t m = rng.randint(0, n);
      const std::vector<int32_t> rows(order.begin(), order.begin() + m);
      std::vector<int32_t> words(static_cast<size_t>(m * w));
      const int64_t density = rng.randint(0, 2);  // few, about half, or all bits set
      for (int32_t& x : words) {
        const uint32_t r = static_cast<uint32_t>(rng.gen()());
        x = static_cast<int32_t>(density == 0 ? (r & static_cast<uint32_t>(rng.gen()()) & static_cast<uint32_t>(rng.gen()()))
                                 : density == 1 ? r
                                                : 0xffffffffu);
      }
      const Tensor mask = Tensor::from_vector(words, {m, w});
      const Tensor row_ids = Tensor::from_vector(rows, {m});
      Tensor gpu_wide = to_gpu(wide);
      ops::apply_token_bitmask(gpu_wide.slice(1, 0, vocab), to_gpu(mask), to_gpu(row_ids));
      ops::apply_token_bitmask(logits, mask, row_ids);
      const Tensor got = to_cpu(gpu_wide);
      ASSERT_EQ(std::memcmp(got.data<float>(), wide.data<float>(), static_cast<size_t>(wide.numel()) * sizeof(float)), 0)
          << "vocab " << vocab << " rows " << n << " masked " << m;
    }
  }
}

}  // namespace
}  // namespace rlm
