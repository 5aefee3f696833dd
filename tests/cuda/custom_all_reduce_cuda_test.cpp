// The one-shot peer-to-peer all-reduce (kernels/cuda/custom_all_reduce.h) against its CPU twin:
// every rank must end with the f32 sum of the ranks' inputs taken in rank order 0..n-1, rounded
// to the dtype once — bit for bit, on every rank. The ranks here are the GPUs of this process
// (peer access enabled instead of CUDA IPC, which needs separate processes; the kernel is the same).
// Calls repeat with changing sizes, so the call numbers and the varying grid are
// exercised the way a decode loop does. Needs two GPUs that reach each other; skips otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/tensor.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/custom_all_reduce.h"
#include "kernels/cuda/rms_norm.h"

namespace rlm {
namespace {

using testing::TestRng;

// The group sizes to test on `devices` GPUs: 2, and all of them (up to kCarMaxRanks) when more.
std::vector<int> groups_of(int devices) {
  std::vector<int> sizes = {2};
  if (std::min(devices, cuda::kCarMaxRanks) > 2) sizes.push_back(std::min(devices, cuda::kCarMaxRanks));
  return sizes;
}

// "cuda:a cannot reach cuda:b" for the first of GPUs 0..n-1 that cannot reach another, else "".
std::string unreachable_pair(int n) {
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (!cuda::car_peer_access(a, b)) return str("cuda:", a, " cannot reach cuda:", b);
    }
  }
  return "";
}

// GPUs 0..n-1 given access to each other's memory, each with a buffer for messages up to max_bytes
// (the caller frees them with car_free).
std::vector<void*> group_buffers(int n, size_t max_bytes) {
  std::vector<void*> buffers(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    for (int p = 0; p < n; ++p) {
      if (p != d) cuda::car_enable_peer_access(d, p);
    }
    buffers[d] = cuda::car_alloc(d, cuda::car_buffer_bytes(max_bytes));
  }
  return buffers;
}

TEST(CustomAllReduce, EveryRankGetsTheRankOrderSum) {
  const int devices = cuda_device_count();
  if (devices < 2) GTEST_SKIP() << "needs two CUDA devices, found " << devices;
  const std::vector<int> group_sizes = groups_of(devices);
  constexpr size_t kMaxBytes = size_t{4} << 20;
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  for (const int n : group_sizes) {
    const std::string unreachable = unreachable_pair(n);
    if (!unreachable.empty()) GTEST_SKIP() << unreachable;
    std::vector<void*> buffers = group_buffers(n, kMaxBytes);
    // 16 bytes up to the limit: one block, a few, and the full grid with several vectors per thread.
    const std::vector<int64_t> sizes_bytes = {16,  8192, 16384, 96 * 1024, 1 << 20, 16, int64_t{4} << 20,
                                              8192};
    for (const DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
      for (const int64_t bytes : sizes_bytes) {
        const int64_t numel = bytes / static_cast<int64_t>(dtype_size(dtype));
        std::vector<Tensor> host, dev;
        for (int d = 0; d < n; ++d) {
          host.push_back(testing::random_dtype(rng, {numel}, dtype, 3.0f));
          dev.push_back(host.back().to(Device::cuda(d)));
        }
        ASSERT_TRUE(cuda::car_fits(dev[0].data_ptr(), numel, dtype, kMaxBytes));
        for (int d = 0; d < n; ++d) {
          cuda::car_all_reduce(d, buffers.data(), d, n, kMaxBytes, dev[d].data_ptr(), numel, dtype,
                               cuda_stream(d));
        }
        for (int d = 0; d < n; ++d) device_synchronize(Device::cuda(d));
        Tensor sum = Tensor::zeros({numel}, DType::kF32);
        for (int d = 0; d < n; ++d) {
          const Tensor f = host[d].to(DType::kF32);
          for (int64_t i = 0; i < numel; ++i) sum.data<float>()[i] += f.data<float>()[i];
        }
        const Tensor want = sum.to(dtype);
        for (int d = 0; d < n; ++d) {
          const Tensor got = dev[d].to(Device::cpu());
          ASSERT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), static_cast<size_t>(bytes)), 0)
              << n << " ranks, " << dtype_name(dtype) << ", " << bytes << " bytes: rank " << d
              << " differs from the rank-order sum";
        }
      }
    }
    for (int d = 0; d < n; ++d) cuda::car_free(d, buffers[d]);
  }
}

// Calls queued back to back with no wait in between (as in a decode step or a CUDA graph), on
// prefixes of one tensor of changing length, so that the grid changes between calls and each rank
// may run ahead of the others: the two alternating data areas must keep every call's sum exact.
TEST(CustomAllReduce, BackToBackCallsOfChangingSize) {
  const int devices = cuda_device_count();
  if (devices < 2) GTEST_SKIP() << "needs two CUDA devices, found " << devices;
  if (!cuda::car_peer_access(0, 1) || !cuda::car_peer_access(1, 0))
    GTEST_SKIP() << "cuda:0 and cuda:1 are not peers";
  constexpr int n = 2;
  constexpr size_t kMaxBytes = size_t{1} << 20;
  constexpr int64_t kNumel = kMaxBytes / 2;
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<void*> buffers = group_buffers(n, kMaxBytes);
  std::vector<Tensor> host, dev;
  for (int d = 0; d < n; ++d) {
    host.push_back(testing::random_dtype(rng, {kNumel}, DType::kBF16, 0.01f));
    dev.push_back(host.back().to(Device::cuda(d)));
  }
  const std::vector<int64_t> lengths = {kNumel, 8,   4096, kNumel / 2, 8,          65536,
                                        kNumel, 512, 8,    4096,       kNumel / 4, 8};
  for (const int64_t len : lengths) {
    for (int d = 0; d < n; ++d) {
      cuda::car_all_reduce(d, buffers.data(), d, n, kMaxBytes, dev[d].data_ptr(), len, DType::kBF16,
                           cuda_stream(d));
    }
    // The CPU twin of the call: every rank's prefix becomes the rounded rank-order f32 sum.
    for (int64_t i = 0; i < len; ++i) {
      float acc = 0.0f;
      for (int d = 0; d < n; ++d) acc += bf16_to_f32(host[d].data<bf16>()[i]);
      for (int d = 0; d < n; ++d) host[d].data<bf16>()[i] = f32_to_bf16(acc);
    }
  }
  for (int d = 0; d < n; ++d) {
    device_synchronize(Device::cuda(d));
    const Tensor got = dev[d].to(Device::cpu());
    ASSERT_EQ(std::memcmp(got.data_ptr(), host[d].data_ptr(), kMaxBytes), 0) << "rank " << d;
  }
  for (int d = 0; d < n; ++d) cuda::car_free(d, buffers[d]);
}

// The all-reduce fused with the next fused add + RMSNorm against the two calls it replaces
// (car_all_reduce, then cuda::fused_add_rms_norm): x and the residual bit-identical on every rank.
// Every call of both paths is queued back to back with no wait, on row counts, widths and weight
// dtypes that change from call to call, so the two kernels share the call numbers and data areas
// with grids that differ as in a decode loop (and as at a step's first and last all-reduce).
TEST(CustomAllReduce, FusedAddRmsNormIsTheAllReduceThenTheNorm) {
  const int devices = cuda_device_count();
  if (devices < 2) GTEST_SKIP() << "needs two CUDA devices, found " << devices;
  const std::vector<int> group_sizes = groups_of(devices);
  constexpr size_t kMaxBytes = size_t{4} << 20;
  constexpr float kEps = 1e-5f;
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  struct Case {
    int64_t rows, d;
    DType weight;
  };
  for (const int n : group_sizes) {
    const std::string unreachable = unreachable_pair(n);
    if (!unreachable.empty()) GTEST_SKIP() << unreachable;
    std::vector<void*> buffers = group_buffers(n, kMaxBytes);
    // The largest batch of 4096-wide rows that fits n slots of the area, one row, grids of 2-64
    // blocks with several rows a block, widths of 1-8 float4s a thread and a row shorter than a
    // block.
    const int64_t most = static_cast<int64_t>(kMaxBytes) / n / (4096 * 4);
    const std::vector<Case> cases = {
        {1, 4096, DType::kBF16}, {3, 4096, DType::kF32},    {most, 4096, DType::kBF16},
        {1, 8192, DType::kF16},  {100, 2048, DType::kBF16}, {2, 12, DType::kF32},
        {65, 1024, DType::kF16}, {1, 4096, DType::kBF16},   {7, 5120, DType::kBF16}};
    struct Run {
      std::vector<Tensor> x_two, res_two, x_one, res_one;  // per rank: the two calls / the fused one
    };
    std::vector<Run> runs;
    for (const Case& c : cases) {
      ASSERT_LE(c.rows * c.d * 4 * n, static_cast<int64_t>(kMaxBytes)) << "a case larger than the buffers";
      const Tensor weight = testing::random_dtype(rng, {c.d}, c.weight, 1.5f);
      Run run;
      for (int d = 0; d < n; ++d) {
        const Device dev = Device::cuda(d);
        const Tensor x = testing::random_dtype(rng, {c.rows, c.d}, DType::kF32, 2.0f);
        const Tensor res = testing::random_dtype(rng, {c.rows, c.d}, DType::kF32, 2.0f);
        run.x_two.push_back(x.to(dev));
        run.res_two.push_back(res.to(dev));
        run.x_one.push_back(x.to(dev));
        run.res_one.push_back(res.to(dev));
        ASSERT_TRUE(cuda::car_norm_fits(run.x_one[d].data_ptr(), run.res_one[d].data_ptr(), c.rows, c.d, n,
                                        kMaxBytes));
      }
      std::vector<Tensor> w_dev;
      for (int d = 0; d < n; ++d) w_dev.push_back(weight.to(Device::cuda(d)));
      // Every rank's all-reduce is queued before any rank's norm: a rank's kernel waits on the GPU
      // for the others', and the first norm launch on a device may block the host (context set-up).
      for (int d = 0; d < n; ++d) {
        cuda::car_all_reduce(d, buffers.data(), d, n, kMaxBytes, run.x_two[d].data_ptr(), c.rows * c.d,
                             DType::kF32, cuda_stream(d));
      }
      for (int d = 0; d < n; ++d) {
        cuda::set_device(d);  // the norm launches on the current device
        const cuda::Rows xr{run.x_two[d].data<float>(), c.rows, 1, c.d, 0};
        const cuda::Rows rr{run.res_two[d].data<float>(), c.rows, 1, c.d, 0};
        cuda::fused_add_rms_norm(d, xr, rr, c.d, w_dev[d].data_ptr(), c.weight, kEps);
      }
      for (int d = 0; d < n; ++d) {
        cuda::car_all_reduce_add_rms_norm(d, buffers.data(), d, n, kMaxBytes, run.x_one[d].data<float>(),
                                          run.res_one[d].data<float>(), c.rows, c.d, w_dev[d].data_ptr(),
                                          c.weight, kEps, cuda_stream(d));
      }
      runs.push_back(std::move(run));
    }
    for (int d = 0; d < n; ++d) device_synchronize(Device::cuda(d));
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const size_t bytes = static_cast<size_t>(c.rows * c.d) * 4;
      for (int d = 0; d < n; ++d) {
        const Tensor x2 = runs[i].x_two[d].to(Device::cpu()), x1 = runs[i].x_one[d].to(Device::cpu());
        const Tensor r2 = runs[i].res_two[d].to(Device::cpu()), r1 = runs[i].res_one[d].to(Device::cpu());
        EXPECT_EQ(std::memcmp(x1.data_ptr(), x2.data_ptr(), bytes), 0)
            << n << " ranks, [" << c.rows << ", " << c.d << "] " << dtype_name(c.weight) << ": rank " << d
            << "'s normalised rows differ from the two calls'";
        EXPECT_EQ(std::memcmp(r1.data_ptr(), r2.data_ptr(), bytes), 0)
            << n << " ranks, [" << c.rows << ", " << c.d << "] " << dtype_name(c.weight) << ": rank " << d
            << "'s residual differs from the two calls'";
      }
    }
    for (int d = 0; d < n; ++d) cuda::car_free(d, buffers[d]);
  }
}

TEST(CustomAllReduce, FusedNormFitsOnlyRowsItTakes) {
  constexpr size_t kMax = size_t{4} << 20;
  alignas(16) static float buf[64];
  EXPECT_TRUE(cuda::car_norm_fits(buf, buf, 1, 4096, 2, kMax));
  EXPECT_TRUE(cuda::car_norm_fits(buf, buf, 128, 4096, 2, kMax));     // 2 MB a slot: exactly half
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf, 129, 4096, 2, kMax));    // more than a slot
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf, 64, 4096, 5, kMax));     // 5 slots of 1 MB do not fit
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf, 1, 4094, 2, kMax));      // not whole float4s
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf, 1, 8196, 2, kMax));      // wider than RMSNorm's registers
  EXPECT_FALSE(cuda::car_norm_fits(buf + 1, buf, 1, 4096, 2, kMax));  // misaligned x
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf + 2, 1, 4096, 2, kMax));  // misaligned residual
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf, 0, 4096, 2, kMax));
  EXPECT_FALSE(cuda::car_norm_fits(buf, buf, 1, 4096, 1, kMax));  // not a group
}

TEST(CustomAllReduce, FitsOnlyAlignedSupportedMessages) {
  constexpr size_t kMax = 1 << 20;
  alignas(16) static char buf[64];
  EXPECT_TRUE(cuda::car_fits(buf, 8, DType::kBF16, kMax));
  EXPECT_FALSE(cuda::car_fits(buf, 7, DType::kBF16, kMax));                // 14 bytes: not whole vectors
  EXPECT_FALSE(cuda::car_fits(buf + 2, 8, DType::kBF16, kMax));            // misaligned
  EXPECT_FALSE(cuda::car_fits(buf, 8, DType::kI32, kMax));                 // not a float type
  EXPECT_FALSE(cuda::car_fits(buf, int64_t{1} << 20, DType::kF32, kMax));  // 4 MB > the limit
  EXPECT_FALSE(cuda::car_fits(buf, 0, DType::kF32, kMax));
}

}  // namespace
}  // namespace rlm
