// The CUDA caching allocator and the one-stream model on a real device: blocks are reused without
// cudaMalloc, reuse is stream-ordered (a copy queued before a free still reads the old data), a
// private pool used by a captured graph is never handed to eager tensors, empty_cache gives memory
// back to the driver, and deferred index checks record errors without synchronising.
#include <gtest/gtest.h>

#include <vector>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "kernels/cuda/cuda_graph.h"
#include "kernels/cuda/index_check.h"
#include "ops/ops.h"

namespace rlm {
namespace {

#define SKIP_WITHOUT_CUDA() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

const Device kGpu = Device::cuda(0);

Tensor filled(int64_t n, float v, Device d) {
  Tensor t = Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), v));
  return t.to(d);
}

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

TEST(CachingAllocatorCuda, ReusesBlocksWithoutCudaMalloc) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& a = cuda_allocator(0);
  { Tensor t = Tensor::empty({1000, 37}, DType::kF32, kGpu), u = Tensor::empty({17}, DType::kI32, kGpu); }
  const int64_t raw = a.stats().num_raw_allocs;
  const size_t free_before = device_memory_info(kGpu).free_bytes;
  for (int i = 0; i < 1000; ++i) {
    Tensor t = Tensor::empty({1000, 37}, DType::kF32, kGpu);
    Tensor u = Tensor::empty({17}, DType::kI32, kGpu);
  }
  EXPECT_EQ(a.stats().num_raw_allocs, raw);
  EXPECT_EQ(device_memory_info(kGpu).free_bytes, free_before);
}

TEST(CachingAllocatorCuda, ReuseIsStreamOrdered) {
  SKIP_WITHOUT_CUDA();
  const int64_t n = int64_t{64} << 20;  // 256 MiB of f32: the copy takes a while
  Tensor dst = Tensor::empty({n}, DType::kF32, kGpu);
  void* src_ptr = nullptr;
  {
    Tensor src = filled(n, 1.0f, kGpu);
    src_ptr = src.data_ptr();
    device_memcpy(dst.data_ptr(), kGpu, src.data_ptr(), kGpu, src.nbytes());  // queued, not finished
  }  // src freed while the copy may still read it
  Tensor reuse = Tensor::empty({n}, DType::kF32, kGpu);
  ASSERT_EQ(reuse.data_ptr(), src_ptr) << "the freed block was not reused";
  device_memset(reuse.data_ptr(), kGpu, 0xFF, reuse.nbytes());  // queued behind the copy
  const std::vector<float> got = host(dst.slice(0, n - 1024, n));
  for (float v : got) ASSERT_EQ(v, 1.0f);
}

TEST(CachingAllocatorCuda, GraphPoolIsNeverHandedToEagerTensors) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& a = cuda_allocator(0);
  const int64_t n = 4096;
  Tensor src = filled(n, 7.0f, kGpu);
  const auto pool = a.create_private_pool();
  cuda::CudaGraph graph(0);
  Tensor out;
  a.begin_private_pool(pool);
  graph.begin_capture();
  {
    Tensor tmp = Tensor::empty({n}, DType::kF32, kGpu);  // graph-pool temporaries
    tmp.copy_(src);
    out = Tensor::empty({n}, DType::kF32, kGpu);
    out.copy_(tmp);
  }
  graph.end_capture();
  a.end_private_pool();
  EXPECT_GE(graph.num_nodes(), 2);
  EXPECT_GE(a.stats().private_pool_bytes, 2 * n * sizeof(float));
  // Eager tensors of the same size must not land on the graph's blocks.
  std::vector<Tensor> eager;
  for (int i = 0; i < 8; ++i) {
    eager.push_back(filled(n, static_cast<float>(i), kGpu));
    ASSERT_NE(eager.back().data_ptr(), out.data_ptr());
  }
  device_memcpy(src.data_ptr(), kGpu, filled(n, 9.0f, Device::cpu()).data_ptr(), Device::cpu(), src.nbytes());
  graph.replay();
  for (float v : host(out)) ASSERT_EQ(v, 9.0f);
  for (int i = 0; i < 8; ++i) {
    for (float v : host(eager[i])) ASSERT_EQ(v, static_cast<float>(i)) << "the replay wrote into an eager tensor";
  }
  out = Tensor();
  const size_t private_before = a.stats().private_pool_bytes;
  a.release_private_pool(pool);
  EXPECT_LT(a.stats().private_pool_bytes, private_before);
}

TEST(CachingAllocatorCuda, EmptyCacheReturnsMemory) {
  SKIP_WITHOUT_CUDA();
  CachingAllocator& a = cuda_allocator(0);
  { Tensor big = Tensor::empty({int64_t{256} << 20}, DType::kU8, kGpu); }
  EXPECT_GE(a.stats().cached_bytes, size_t{256} << 20);
  const size_t free_before = device_memory_info(kGpu).free_bytes;
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  EXPECT_GE(device_memory_info(kGpu).free_bytes, free_before + (size_t{256} << 20));
}

TEST(DeferredIndexChecks, RecordInsteadOfSynchronising) {
  SKIP_WITHOUT_CUDA();
  ASSERT_FALSE(cuda::take_device_error(0).has_value()) << "a previous test left an error behind";
  const Tensor weight = filled(10 * 4, 0.5f, kGpu).view({10, 4});
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 12, 3}).to(kGpu);
  Tensor out = filled(3 * 4, -1.0f, kGpu).view({3, 4});
  {
    cuda::DeferredIndexChecks deferred;
    ops::embedding(ids, weight, out);  // no throw: recorded
  }
  const std::optional<std::string> err = cuda::take_device_error(0);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("embedding: token id 12 at position 1 is outside [0, 10)"), std::string::npos) << *err;
  EXPECT_FALSE(cuda::take_device_error(0).has_value()) << "the record is cleared once read";
  const std::vector<float> got = host(out);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(got[c], 0.5f);
    EXPECT_EQ(got[4 + c], -1.0f) << "the bad row must stay unwritten";
    EXPECT_EQ(got[8 + c], 0.5f);
  }
  // store_kv_cache: slot -1 is a padded row (skipped silently), slot 9 of 8 is an error.
  const Tensor k = filled(3 * 2 * 4, 2.0f, kGpu).view({3, 2, 4});
  Tensor kc = filled(8 * 2 * 4, 0.0f, kGpu).view({8, 2, 4});
  Tensor vc = filled(8 * 2 * 4, 0.0f, kGpu).view({8, 2, 4});
  {
    cuda::DeferredIndexChecks deferred;
    ops::store_kv_cache(k, k, kc, vc, Tensor::from_vector(std::vector<int32_t>{0, -1, 5}).to(kGpu));
  }
  EXPECT_FALSE(cuda::take_device_error(0).has_value());
  const std::vector<float> kh = host(kc);
  for (int64_t s = 0; s < 8; ++s) {
    for (int e = 0; e < 8; ++e) EXPECT_EQ(kh[s * 8 + e], (s == 0 || s == 5) ? 2.0f : 0.0f) << "slot " << s;
  }
  {
    cuda::DeferredIndexChecks deferred;
    ops::store_kv_cache(k, k, kc, vc, Tensor::from_vector(std::vector<int32_t>{0, 9, 5}).to(kGpu));
  }
  const std::optional<std::string> kv_err = cuda::take_device_error(0);
  ASSERT_TRUE(kv_err.has_value());
  EXPECT_NE(kv_err->find("out_cache_loc slot 9 at position 1 is outside [0, 8)"), std::string::npos) << *kv_err;
  // Outside the scope the immediate check still rejects -1 before writing anything.
  EXPECT_THROW(ops::store_kv_cache(k, k, kc, vc, Tensor::from_vector(std::vector<int32_t>{0, -1, 5}).to(kGpu)),
               Error);
}

}  // namespace
}  // namespace rlm
