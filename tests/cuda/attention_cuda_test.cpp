// CUDA paged attention (split-KV decode, flash-style prefill, the ops dispatcher) against the CPU
// kernel on random page tables, and the GPU kv_indices builder against a host reference.
// Tolerances (relative L2 against the CPU kernel on the same cache values):
//  - decode (the split-KV kernels) and the FMA prefill kernel: 1e-4 for f32 and FP8 (e4m3)
//    caches, 5e-3 for 16-bit caches; they widen the cache exactly and accumulate in f32 (the
//    tensor-core decode kernel multiplies hi + lo parts of q and p in the cache's 16-bit type, f16
//    for FP8: ~16-22 significant bits), so the only difference is the summation order (and, for
//    FP8, where the per-layer k_scale / v_scale multiply: the CPU kernel scales each key and
//    value, the GPU kernels the score scale and the output);
//  - the tensor-core prefill kernel (bf16/f16 caches, and FP8 caches widened exactly to f16): q and
//    the softmax numerators P are rounded to the cache's 16-bit type (8 significant bits for bf16,
//    11 for f16 and FP8) before the matrix products, so 2e-2 for bf16 and 5e-3 for f16 and FP8. A
//    float64 simulation of that rounding on these tests' inputs (q scale up to 4, soft-cap, window)
//    gave 2-3e-3 for bf16 and 3-4e-4 for f16.
// The fallback kernels (cache strides not 16-byte aligned) are covered by MisalignedCachesUseFallbacks,
// every head size (the padded instantiations, split q/k and v sizes) by AllHeadDimsMatchCpu.
// Timings: --gtest_also_run_disabled_tests --gtest_filter='*Timing*'; `radixlm bench attention`
// is the benchmark.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "core/device.h"
#include "kernels/cuda/paged_attention.h"
#include "ops/ops.h"
#include "unit/ops_test_util.h"

namespace rlm {
namespace {

using testing::TestRng;

#define SKIP_WITHOUT_CUDA() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"

void cuda_ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

struct Batch {
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0}, kv_indices, seq_lens;
  int64_t num_tokens = 0;
};

// A random problem: caches filled for the used slots only (unused slots are NaN so stray reads show).
// FP8 (e4m3) caches hold the values rounded to e4m3 with per-layer scales k_scale = 0.37 and
// v_scale = 1.9 (the attention reads e4m3 * scale; not powers of two, so that a scale applied
// twice or not at all shows).
struct Problem {
  Batch b;
  int64_t page_size = 1, hq = 0, hk = 0, d = 0;
  Tensor q, k, v;  // CPU
  ops::AttentionParams p;
};

// Requests (seq_len, qo_len); pages drawn without replacement from a shuffled pool (+ spare pages).
// dv > 0: the values (and the output) have head size dv instead of d.
Problem make_problem(TestRng& rng, const std::vector<std::pair<int32_t, int32_t>>& reqs, int64_t page_size,
                     int64_t hk, int64_t group, int64_t d, DType cache_dtype, float q_scale = 1.0f, int64_t dv = 0) {
  if (dv == 0) dv = d;
  Problem pr;
  pr.page_size = page_size;
  pr.hk = hk;
  pr.hq = hk * group;
  pr.d = d;
  int64_t num_pages = 4;
  for (auto [seq_len, qo_len] : reqs) num_pages += (seq_len + page_size - 1) / page_size + 1;
  std::vector<int32_t> pool(num_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  size_t next = 0;
  Batch& b = pr.b;
  for (auto [seq_len, qo_len] : reqs) {
    const int64_t pages = (seq_len + page_size - 1) / page_size + rng.randint(0, 1);
    for (int64_t i = 0; i < pages; ++i) b.kv_indices.push_back(pool.at(next++));
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
    b.qo_indptr.push_back(b.qo_indptr.back() + qo_len);
    b.seq_lens.push_back(seq_len);
  }
  b.num_tokens = b.qo_indptr.back();
  const int64_t slots = num_pages * page_size;
  Tensor kc = Tensor::empty({slots, hk, d}, DType::kF32), vc = Tensor::empty({slots, hk, dv}, DType::kF32);
  testing::poison(kc);
  testing::poison(vc);
  float* kp = kc.data<float>();
  float* vp = vc.data<float>();
  for (size_t r = 0; r < reqs.size(); ++r) {
    for (int64_t pos = 0; pos < b.seq_lens[r]; ++pos) {
      const int64_t s = b.kv_indices[b.kv_indptr[r] + pos / page_size] * page_size + pos % page_size;
      for (int64_t i = 0; i < hk * d; ++i) kp[s * hk * d + i] = rng.normal();
      for (int64_t i = 0; i < hk * dv; ++i) vp[s * hk * dv + i] = rng.normal();
    }
  }
  pr.k = cache_dtype == DType::kF32 ? kc : kc.to(cache_dtype);
  pr.v = cache_dtype == DType::kF32 ? vc : vc.to(cache_dtype);
  if (cache_dtype == DType::kF8E4M3) {
    pr.p.k_scale = 0.37f;
    pr.p.v_scale = 1.9f;
  }
  pr.q = testing::random_normal(rng, {std::max<int64_t>(b.num_tokens, 0), pr.hq, d}, q_scale);
  pr.p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  return pr;
}

// [num_tokens, hq, v head size]
Shape out_shape(const Problem& pr) { return {pr.q.size(0), pr.q.size(1), pr.v.size(2)}; }

Tensor cpu_out(const Problem& pr) {
  Tensor out = Tensor::empty(out_shape(pr), DType::kF32);
  testing::poison(out);
  ops::paged_attention(pr.q, pr.k, pr.v, Tensor::from_vector(pr.b.qo_indptr), Tensor::from_vector(pr.b.kv_indptr),
                       Tensor::from_vector(pr.b.kv_indices), Tensor::from_vector(pr.b.seq_lens), pr.page_size, pr.p,
                       out);
  return out;
}

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

// Device copies of one problem.
struct GpuProblem {
  Tensor q, k, v, qo, kv, idx, sl;
  explicit GpuProblem(const Problem& pr)
      : q(on_gpu(pr.q)), k(on_gpu(pr.k)), v(on_gpu(pr.v)), qo(on_gpu(Tensor::from_vector(pr.b.qo_indptr))),
        kv(on_gpu(Tensor::from_vector(pr.b.kv_indptr))), idx(on_gpu(Tensor::from_vector(pr.b.kv_indices))),
        sl(on_gpu(Tensor::from_vector(pr.b.seq_lens))) {}
};

Tensor poisoned_gpu_out(const Problem& pr) {
  Tensor out = Tensor::empty(out_shape(pr), DType::kF32);
  testing::poison(out);
  return on_gpu(out);
}

// Through ops::paged_attention (the dispatcher with its host-side checks and plan).
Tensor gpu_out(const Problem& pr) {
  const GpuProblem g(pr);
  const Tensor out = poisoned_gpu_out(pr);
  ops::paged_attention(g.q, g.k, g.v, g.qo, g.kv, g.idx, g.sl, pr.page_size, pr.p, out);
  return out.to(Device::cpu());
}

enum class Kernel { kDecode, kPrefill };

// A GPU copy of cache `c` [slots, hk, d] as a view with head stride d + pad (pad columns NaN), so
// that pad > 0 not a multiple of 8 gives rows that are not 16-byte aligned.
Tensor padded_gpu_cache(const Tensor& c, int64_t pad) {
  Tensor wide = Tensor::empty({c.size(0), c.size(1), c.size(2) + pad}, c.dtype());
  testing::poison(wide);
  wide.slice(2, 0, c.size(2)).copy_(c);
  return on_gpu(wide).slice(2, 0, c.size(2));
}

// Straight to one kernel (num_kv_splits only for the decode kernel; 0 = the split rule).
// cache_pad > 0 passes the caches as padded views (see padded_gpu_cache).
Tensor gpu_kernel_out(const Problem& pr, Kernel kernel, int num_kv_splits = 0, int64_t cache_pad = 0) {
  GpuProblem g(pr);
  if (cache_pad > 0) {
    g.k = padded_gpu_cache(pr.k, cache_pad);
    g.v = padded_gpu_cache(pr.v, cache_pad);
  }
  const Tensor out = poisoned_gpu_out(pr);
  cpu::PagedBatch hb;
  hb.batch_size = static_cast<int64_t>(pr.b.seq_lens.size());
  hb.qo_indptr = pr.b.qo_indptr.data();
  hb.kv_indptr = pr.b.kv_indptr.data();
  hb.kv_indices = pr.b.kv_indices.data();
  hb.seq_lens = pr.b.seq_lens.data();
  hb.num_pages_indexed = static_cast<int64_t>(pr.b.kv_indices.size());
  hb.page_size = pr.page_size;
  hb.num_slots = pr.k.size(0);
  hb.num_tokens = pr.b.num_tokens;
  const cuda::AttentionPlan plan = cuda::make_attention_plan(hb);
  cpu::PagedBatch db = hb;
  db.qo_indptr = g.qo.data<int32_t>();
  db.kv_indptr = g.kv.data<int32_t>();
  db.kv_indices = g.idx.data<int32_t>();
  db.seq_lens = g.sl.data<int32_t>();
  cpu::AttnConfig cfg;
  cfg.num_qo_heads = pr.hq;
  cfg.num_kv_heads = pr.hk;
  cfg.head_dim = pr.d;
  cfg.v_head_dim = pr.v.size(2);
  cfg.scale = pr.p.scale;
  cfg.sliding_window = pr.p.sliding_window;
  cfg.logit_soft_cap = pr.p.logit_soft_cap;
  cfg.k_scale = pr.p.k_scale;
  cfg.v_scale = pr.p.v_scale;
  auto rows = [](const Tensor& t) { return cpu::AttnRows{t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; };
  if (kernel == Kernel::kDecode) {
    cuda::paged_attention_decode(rows(g.q), rows(g.k), rows(g.v), db, cfg, plan, out.data<float>(), out.stride(0),
                                 out.stride(1), num_kv_splits);
  } else {
    cuda::paged_attention_prefill(rows(g.q), rows(g.k), rows(g.v), db, cfg, plan, out.data<float>(), out.stride(0),
                                  out.stride(1));
  }
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return out.to(Device::cpu());
}

// Decode kernels and the FMA prefill kernel (exact widening, f32 sums).
double tolerance(const Problem& pr) {
  return pr.k.dtype() == DType::kF32 || pr.k.dtype() == DType::kF8E4M3 ? 1e-4 : 5e-3;
}
// The prefill dispatch: the tensor-core kernel for bf16/f16/FP8 caches (q and P rounded to 16 bits).
double prefill_tolerance(const Problem& pr) {
  switch (pr.k.dtype()) {
    case DType::kBF16: return 2e-2;
    case DType::kF16:
    case DType::kF8E4M3: return 5e-3;
    default: return 1e-4;
  }
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  EXPECT_LE(testing::rel_l2(got, testing::to_doubles(want)), tol) << what;
}

std::string describe(const Problem& pr) {
  return str("page_size ", pr.page_size, " hq ", pr.hq, " hk ", pr.hk, " head_dim ", pr.d, " v_head_dim ", pr.v.size(2), " cache ",
             dtype_name(pr.k.dtype()), " window ", pr.p.sliding_window, " soft_cap ", pr.p.logit_soft_cap);
}

std::vector<std::pair<int32_t, int32_t>> decode_requests(TestRng& rng, int n, int32_t max_len) {
  std::vector<std::pair<int32_t, int32_t>> reqs;
  reqs.push_back({max_len, 1});  // the longest one: several KV splits
  reqs.push_back({1, 1});
  for (int i = 2; i < n; ++i) reqs.push_back({static_cast<int32_t>(rng.randint(1, max_len)), 1});
  std::shuffle(reqs.begin(), reqs.end(), rng.gen());
  return reqs;
}

TEST(AttentionCuda, DecodeMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  for (int64_t page_size : {1, 16, 64}) {
    for (int64_t group : {1, 4, 8}) {
      for (int64_t d : {64, 128, 256}) {
        for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
          const int32_t max_len = static_cast<int32_t>(rng.randint(1000, 5000));
          const Problem pr = make_problem(rng, decode_requests(rng, 5, max_len), page_size, 2, group, d, dt);
          SCOPED_TRACE(describe(pr));
          const Tensor want = cpu_out(pr);
          expect_close(gpu_out(pr), want, tolerance(pr), "dispatcher");
          for (int splits : {1, 3, 12, 16, 64}) {  // 12, 16: the merge's one-round-trip path
            expect_close(gpu_kernel_out(pr, Kernel::kDecode, splits), want, tolerance(pr), str("splits ", splits));
          }
          expect_close(gpu_kernel_out(pr, Kernel::kPrefill), want, prefill_tolerance(pr), "prefill kernel on decode");
        }
      }
    }
  }
}

// FP8 caches: grids that overflow one wave of the 4-warp tensor-core decode kernel by at most one
// block a multiprocessor run its 8-warp instantiation (mma_decode_warps, from the occupancy the
// runtime reports for the 4-warp kernel: 3 to 5 blocks a multiprocessor, by its registers and
// shared memory). One split, 8 kv heads of 4 q heads each (one block a kv head): 8 blocks a request,
// so for each of those occupancies these batches fall at both ends of that band.
TEST(AttentionCuda, Fp8DecodeAtTheEightWarpBatches) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (auto [d, per_sm] : {std::pair<int64_t, int>{128, 3}, {128, 4}, {128, 5}, {64, 3}, {64, 4}, {64, 5}}) {
    for (int bs : {per_sm * sms / 8 + 1, (per_sm + 1) * sms / 8}) {
      std::vector<std::pair<int32_t, int32_t>> reqs;
      for (int i = 0; i < bs; ++i) reqs.push_back({static_cast<int32_t>(rng.randint(1, 300)), 1});
      const Problem pr = make_problem(rng, reqs, 16, 8, 4, d, DType::kF8E4M3);
      SCOPED_TRACE(str(describe(pr), " batch ", bs));
      const Tensor want = cpu_out(pr);
      expect_close(gpu_kernel_out(pr, Kernel::kDecode, 1), want, tolerance(pr), "1 split");
      expect_close(gpu_out(pr), want, tolerance(pr), "dispatcher");
    }
  }
}

// A mixed batch: fresh prefills, extends over cached prefixes, decode rows, an empty request.
std::vector<std::pair<int32_t, int32_t>> mixed_requests(TestRng& rng) {
  std::vector<std::pair<int32_t, int32_t>> reqs;
  const int32_t fresh = static_cast<int32_t>(rng.randint(1, 300));
  reqs.push_back({fresh, fresh});
  const int32_t ext = static_cast<int32_t>(rng.randint(1, 300));
  reqs.push_back({static_cast<int32_t>(rng.randint(3000, 4700)) + ext, ext});
  const int32_t ext2 = static_cast<int32_t>(rng.randint(2, 40));
  reqs.push_back({static_cast<int32_t>(rng.randint(1, 100)) + ext2, ext2});
  reqs.push_back({static_cast<int32_t>(rng.randint(1, 2000)), 1});
  reqs.push_back({1, 1});
  reqs.push_back({0, 0});
  std::shuffle(reqs.begin(), reqs.end(), rng.gen());
  return reqs;
}

TEST(AttentionCuda, PrefillMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  const int64_t page_sizes[] = {1, 16, 64};
  int i = 0;
  for (int64_t group : {1, 4, 8}) {
    for (int64_t d : {64, 128, 256}) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
        const Problem pr = make_problem(rng, mixed_requests(rng), page_sizes[i++ % 3], 2, group, d, dt);
        SCOPED_TRACE(describe(pr));
        const Tensor want = cpu_out(pr);
        expect_close(gpu_out(pr), want, prefill_tolerance(pr), "dispatcher");
      }
    }
  }
}

TEST(AttentionCuda, SlidingWindowAndSoftCap) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  int i = 0;
  for (int variant = 1; variant < 4; ++variant) {
    for (int64_t window : {1, 100, 700}) {
      for (bool decode : {true, false}) {
        const int64_t page_size = (i++ % 2) ? 16 : 1;
        const int64_t d = decode ? 128 : 64;
        const DType dt = (i % 3 == 0) ? DType::kBF16 : DType::kF32;
        const auto reqs = decode ? decode_requests(rng, 4, 3000) : mixed_requests(rng);
        // Larger q so that the scores reach the soft-cap's non-linear range. Decode: groups of 4 and
        // 6 in turn (bf16 caches: the tensor-core kernel's one-block groups of 4 and of 6 of its 8).
        const int64_t group = decode && i % 4 >= 2 ? 6 : 4;
        Problem pr = make_problem(rng, reqs, page_size, 2, group, d, dt, 4.0f);
        if (variant & 1) pr.p.sliding_window = window;
        if (variant & 2) pr.p.logit_soft_cap = 5.0f;
        SCOPED_TRACE(describe(pr));
        const Tensor want = cpu_out(pr);
        expect_close(gpu_out(pr), want, decode ? tolerance(pr) : prefill_tolerance(pr), "dispatcher");
        if (decode) expect_close(gpu_kernel_out(pr, Kernel::kDecode, 7), want, tolerance(pr), "decode, 7 splits");
      }
    }
  }
}

TEST(AttentionCuda, F16CacheAndStridedQ) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  for (bool decode : {true, false}) {
    Problem pr = make_problem(rng, decode ? decode_requests(rng, 3, 900) : mixed_requests(rng), 16, 2, 4, 128,
                              DType::kF16);
    // q as a slice of a fused qkv buffer (token stride != hq * d).
    const Tensor qkv = testing::random_normal(rng, {pr.b.num_tokens, pr.hq + 2 * pr.hk, pr.d});
    pr.q = qkv.slice(1, 0, pr.hq);
    const Tensor want = cpu_out(pr);
    const GpuProblem g(pr);
    const Tensor qkv_gpu = on_gpu(qkv);
    const Tensor q_gpu = qkv_gpu.slice(1, 0, pr.hq);
    const Tensor out = poisoned_gpu_out(pr);
    ops::paged_attention(q_gpu, g.k, g.v, g.qo, g.kv, g.idx, g.sl, pr.page_size, pr.p, out);
    expect_close(out.to(Device::cpu()), want, decode ? 5e-3 : prefill_tolerance(pr), decode ? "f16 decode" : "f16 prefill");
  }
}

TEST(AttentionCuda, BatchedAgreesWithSingleRequests) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  for (int variant = 0; variant < 4; ++variant) {
    const bool decode = variant % 2 == 0;
    const DType dt = variant < 2 ? DType::kF32 : DType::kBF16;  // bf16 prefill: the tensor-core kernel
    const Problem pr = make_problem(rng, decode ? decode_requests(rng, 6, 4000) : mixed_requests(rng), 16, 2, 4, 128,
                                    dt);
    SCOPED_TRACE(describe(pr));
    const Tensor batched = gpu_out(pr);
    for (size_t r = 0; r < pr.b.seq_lens.size(); ++r) {
      const int32_t q0 = pr.b.qo_indptr[r], q1 = pr.b.qo_indptr[r + 1];
      if (q0 == q1) continue;
      Problem one = pr;
      one.b.qo_indptr = {0, q1 - q0};
      one.b.kv_indices.assign(pr.b.kv_indices.begin() + pr.b.kv_indptr[r], pr.b.kv_indices.begin() + pr.b.kv_indptr[r + 1]);
      one.b.kv_indptr = {0, static_cast<int32_t>(one.b.kv_indices.size())};
      one.b.seq_lens = {pr.b.seq_lens[r]};
      one.b.num_tokens = q1 - q0;
      one.q = pr.q.slice(0, q0, q1).clone();
      // Decode split counts depend on the batch, so agreement is to the f32 tolerance.
      // A lone decode row goes to the decode kernel (exact widening) while in the bf16 mixed batch
      // it ran through the tensor-core prefill kernel (q rounded to bf16).
      const double tol = (dt == DType::kBF16 && !decode && q1 - q0 == 1) ? prefill_tolerance(pr) : 1e-5;
      expect_close(gpu_out(one), batched.slice(0, q0, q1).clone(), tol, str("request ", r));
    }
  }
}

// Group sizes other than DecodeMatchesCpu's 1, 4 and 8, for every head_dim and cache dtype: the
// vectorised decode kernel runs blocks of fewer heads than the group (3 -> 1, 5 -> 1, 6 -> 2,
// 7 -> 1, 12 -> 4, 16 -> 8 x 2 blocks; 2 -> one block of 2); at head_dim 64 / 128 the tensor-core
// kernel (FP8, bf16 and f16 caches; 16-bit chunks loaded into registers, FP8 ones staged in shared
// memory) runs its instantiation for 8 heads with the block's heads fewer (3, 5, 6, 7 -> one block
// of the whole group, 12 -> 2 blocks of 6; 2 -> one block of 2 for FP8 at head_dim 128) or 8
// (16 -> 2 blocks); page sizes 16 and 24 (not a power of two: the kernels' general
// page-lookup path).
TEST(AttentionCuda, DecodeGroupSizes) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  int i = 0;
  for (int64_t group : {2, 3, 5, 6, 7, 12, 16}) {
    for (int64_t d : {64, 128, 256}) {
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
        const int64_t page_size = (i++ % 2) ? 24 : 16;
        const Problem pr = make_problem(rng, decode_requests(rng, 4, 1500), page_size, 2, group, d, dt);
        SCOPED_TRACE(describe(pr));
        const Tensor want = cpu_out(pr);
        expect_close(gpu_out(pr), want, tolerance(pr), "dispatcher");
        expect_close(gpu_kernel_out(pr, Kernel::kDecode, 5), want, tolerance(pr), "5 splits");
      }
    }
  }
}

// The tensor-core prefill kernel on every head_dim x cache dtype x variant (window, soft-cap), with
// a long fresh prompt (several query tiles, causal diagonal), an extend over a long prefix (many
// key tiles, double buffering) and odd lengths around the tile sizes; page sizes 1, 16, 64 and 24
// (not a power of two).
TEST(AttentionCuda, TensorCorePrefillVariants) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  const int64_t page_sizes[] = {1, 16, 64, 24};
  int i = 0;
  for (int64_t d : {64, 128, 256}) {
    for (DType dt : {DType::kBF16, DType::kF16, DType::kF8E4M3}) {
      for (int variant = 0; variant < 4; ++variant) {
        const int32_t fresh = static_cast<int32_t>(rng.randint(300, 700));
        const int32_t ext = static_cast<int32_t>(rng.randint(60, 200));
        const std::vector<std::pair<int32_t, int32_t>> reqs = {
            {fresh, fresh}, {static_cast<int32_t>(rng.randint(900, 1500)) + ext, ext}, {64, 64}, {129, 65},
            {static_cast<int32_t>(rng.randint(2, 50)), 1}};
        const int64_t page_size = page_sizes[(i / 4 + i) % 4];  // every variant meets every page size
        ++i;
        Problem pr = make_problem(rng, reqs, page_size, 2, 4, d, dt, variant & 2 ? 4.0f : 1.0f);
        if (variant & 1) pr.p.sliding_window = rng.randint(1, 300);
        if (variant & 2) pr.p.logit_soft_cap = 5.0f;
        SCOPED_TRACE(describe(pr));
        const Tensor want = cpu_out(pr);
        expect_close(gpu_kernel_out(pr, Kernel::kPrefill), want, prefill_tolerance(pr), "tensor-core prefill");
      }
    }
  }
}

// Every head size the kernels take -- the tuned 64 / 128 / 256 and the padded instantiations of
// the other multiples of 16 -- and q/k 192 with v 128, on every cache dtype: the dispatcher, the
// decode kernels (tensor-core for FP8 at 64 / 128, vectorised for bf16/f16 and the other FP8
// sizes, scalar for f32 and for misaligned caches, with 1, 5
// and 3 splits) and the prefill kernels (tensor-core for bf16/f16/FP8, FMA for f32 and misaligned
// caches), with sliding window / soft-cap, GQA group and page size rotating over the
// sizes.
TEST(AttentionCuda, AllHeadDimsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  const std::pair<int64_t, int64_t> sizes[] = {{16, 16},   {32, 32},   {48, 48},   {64, 64},
                                               {80, 80},   {96, 96},   {112, 112}, {128, 128},
                                               {160, 160}, {192, 192}, {256, 256}, {192, 128}};
  const int64_t page_sizes[] = {1, 16, 24};
  const int64_t groups[] = {1, 3, 4, 8};
  int i = 0;
  for (auto [d, dv] : sizes) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
      const int variant = i % 4;
      const int64_t page_size = page_sizes[i % 3], group = groups[(i / 3) % 4];
      ++i;
      const int64_t pad = dt == DType::kF32 ? 1 : 4;  // misaligned cache rows: the scalar kernels
      const float q_scale = variant & 2 ? 4.0f : 1.0f;
      auto set_variant = [&](Problem& pr) {
        if (variant & 1) pr.p.sliding_window = rng.randint(1, 300);
        if (variant & 2) pr.p.logit_soft_cap = 5.0f;
      };
      Problem dec = make_problem(rng, decode_requests(rng, 4, 1500), page_size, 2, group, d, dt, q_scale, dv);
      set_variant(dec);
      SCOPED_TRACE(describe(dec));
      const Tensor want_dec = cpu_out(dec);
      expect_close(gpu_out(dec), want_dec, tolerance(dec), "dispatcher, decode");
      for (int splits : {1, 5}) {
        expect_close(gpu_kernel_out(dec, Kernel::kDecode, splits), want_dec, tolerance(dec), str("decode, splits ", splits));
      }
      expect_close(gpu_kernel_out(dec, Kernel::kDecode, 3, pad), want_dec, tolerance(dec), "scalar decode, 3 splits");

      const int32_t fresh = static_cast<int32_t>(rng.randint(100, 300));
      const int32_t ext = static_cast<int32_t>(rng.randint(30, 150));
      const std::vector<std::pair<int32_t, int32_t>> reqs = {
          {fresh, fresh}, {static_cast<int32_t>(rng.randint(600, 1200)) + ext, ext}, {64, 64}, {129, 65},
          {static_cast<int32_t>(rng.randint(2, 50)), 1}};
      Problem pre = make_problem(rng, reqs, page_size, 2, group, d, dt, q_scale, dv);
      set_variant(pre);
      SCOPED_TRACE(describe(pre));
      const Tensor want_pre = cpu_out(pre);
      expect_close(gpu_out(pre), want_pre, prefill_tolerance(pre), "dispatcher, prefill");
      expect_close(gpu_kernel_out(pre, Kernel::kPrefill, 0, pad), want_pre, tolerance(pre), "FMA prefill");
    }
  }
}

// Caches whose head stride is not a multiple of 16 bytes take the scalar fallback kernels (decode
// and prefill); the padding columns are NaN, so a read past head_dim shows.
TEST(AttentionCuda, MisalignedCachesUseFallbacks) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3}) {
    for (int64_t d : {64, 128}) {
      const int64_t pad = dt == DType::kF32 ? 1 : 4;  // 4 or 8 bytes past each head row (FP8: 4)
      const Problem dec = make_problem(rng, decode_requests(rng, 4, 2000), 16, 2, 4, d, dt);
      SCOPED_TRACE(describe(dec));
      const Tensor want_dec = cpu_out(dec);
      for (int splits : {0, 3}) {
        expect_close(gpu_kernel_out(dec, Kernel::kDecode, splits, pad), want_dec, tolerance(dec),
                     str("fallback decode, splits ", splits));
      }
      const Problem pre = make_problem(rng, mixed_requests(rng), 16, 2, 4, d, dt);
      const Tensor want_pre = cpu_out(pre);
      expect_close(gpu_kernel_out(pre, Kernel::kPrefill, 0, pad), want_pre, tolerance(pre), "fallback prefill");
    }
  }
}

TEST(AttentionCuda, BadIndexDataIsAnError) {
  SKIP_WITHOUT_CUDA();
  const Tensor q = on_gpu(Tensor::zeros({3, 2, 64}, DType::kF32)), out = on_gpu(Tensor::zeros({3, 2, 64}, DType::kF32));
  const Tensor kc = on_gpu(Tensor::zeros({8, 1, 64}, DType::kF32));
  auto g = [](std::vector<int32_t> v) { return on_gpu(Tensor::from_vector(v)); };
  const std::string msg = testing::error_of([&] {
    ops::paged_attention(q, kc, kc, g({0, 3}), g({0, 2}), g({0, 2}), g({5}), 4, ops::AttentionParams{}, out);
  });
  EXPECT_NE(msg.find("page index 2 (kv_indices[1]) is outside the KV pool of 8 slots"), std::string::npos) << msg;
  // Head sizes that are not multiples of 16, or above 256 (q/k or v).
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{24, 24}, {272, 272}, {64, 40}, {8, 64}}) {
    const Tensor qd = on_gpu(Tensor::zeros({3, 2, d}, DType::kF32)), od = on_gpu(Tensor::zeros({3, 2, dv}, DType::kF32));
    const Tensor kd = on_gpu(Tensor::zeros({8, 1, d}, DType::kF32)), vd = on_gpu(Tensor::zeros({8, 1, dv}, DType::kF32));
    for (auto qo : {std::vector<int32_t>{0, 1}, std::vector<int32_t>{0, 3}}) {  // decode, prefill
      const Tensor qs = qd.slice(0, 0, qo.back()), os = od.slice(0, 0, qo.back());
      const std::string msg_d = testing::error_of([&] {
        ops::paged_attention(qs, kd, vd, g(qo), g({0, 2}), g({0, 1}), g({5}), 4, ops::AttentionParams{}, os);
      });
      EXPECT_NE(msg_d.find(str("head_dim ", d, " / v_head_dim ", dv, " is not supported")), std::string::npos) << msg_d;
    }
  }
}

// ---- kv_indices builder ----------------------------------------------------------------------------

// A CPU i32 tensor of n copies of -7 (a value the builder never writes).
Tensor i32_filled(int64_t n) { return Tensor::from_vector(std::vector<int32_t>(static_cast<size_t>(n), -7), {n}); }

TEST(AttentionCuda, BuildKvIndicesMatchesHost) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  SCOPED_TRACE(rng.trace());
  std::printf("random seed %llu\n", static_cast<unsigned long long>(rng.seed()));
  for (int64_t page_size : {1, 16, 64}) {
    for (int64_t bs : {0, 1, 7, 300, 1000}) {
      const int64_t max_reqs = bs + 5, max_ctx = 1000 / page_size * page_size + page_size;
      // req_to_token rows hold slots page * page_size + offset of random distinct pages.
      std::vector<int32_t> r2t(static_cast<size_t>(max_reqs * max_ctx));
      for (int64_t r = 0; r < max_reqs; ++r) {
        for (int64_t i = 0; i < max_ctx; i += page_size) {
          const int64_t page = rng.randint(0, 1 << 20);
          for (int64_t o = 0; o < page_size; ++o) r2t[r * max_ctx + i + o] = static_cast<int32_t>(page * page_size + o);
        }
      }
      std::vector<int32_t> pool(max_reqs);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng.gen());
      pool.resize(bs);
      std::vector<int32_t> sl(bs);
      for (auto& s : sl) s = static_cast<int32_t>(rng.randint(0, max_ctx));
      if (bs > 1) sl[0] = static_cast<int32_t>(max_ctx);
      std::vector<int32_t> want_ptr{0}, want_idx;
      for (int64_t r = 0; r < bs; ++r) {
        for (int64_t i = 0; i < sl[r]; i += page_size) want_idx.push_back(r2t[pool[r] * max_ctx + i] / page_size);
        want_ptr.push_back(static_cast<int32_t>(want_idx.size()));
      }
      const int64_t capacity = bs * (max_ctx / page_size) + 3;
      const Tensor r2t_g = on_gpu(Tensor::from_vector(r2t)), pool_g = on_gpu(Tensor::from_vector(pool, {bs}));
      const Tensor sl_g = on_gpu(Tensor::from_vector(sl, {bs}));
      const Tensor ptr_g = on_gpu(i32_filled(bs + 1)), idx_g = on_gpu(i32_filled(capacity));
      const Tensor err_g = on_gpu(i32_filled(1));
      cuda::build_kv_indices(r2t_g.data<int32_t>(), max_reqs, max_ctx, max_ctx, pool_g.data<int32_t>(),
                             sl_g.data<int32_t>(), bs, page_size, ptr_g.data<int32_t>(), idx_g.data<int32_t>(),
                             capacity, err_g.data<int32_t>());
      const Tensor ptr = ptr_g.to(Device::cpu()), idx = idx_g.to(Device::cpu()), err = err_g.to(Device::cpu());
      SCOPED_TRACE(str("page_size ", page_size, " bs ", bs));
      EXPECT_EQ(err.data<int32_t>()[0], 0);
      EXPECT_EQ(std::vector<int32_t>(ptr.data<int32_t>(), ptr.data<int32_t>() + bs + 1), want_ptr);
      EXPECT_EQ(std::vector<int32_t>(idx.data<int32_t>(), idx.data<int32_t>() + want_idx.size()), want_idx);
    }
  }
}

TEST(AttentionCuda, BuildKvIndicesFlagsBadData) {
  SKIP_WITHOUT_CUDA();
  const int64_t max_reqs = 4, max_ctx = 32, page_size = 16;
  std::vector<int32_t> r2t(max_reqs * max_ctx);
  std::iota(r2t.begin(), r2t.end(), 0);
  const Tensor r2t_g = on_gpu(Tensor::from_vector(r2t));
  auto run = [&](std::vector<int32_t> pool, std::vector<int32_t> sl, int64_t capacity) {
    const int64_t bs = static_cast<int64_t>(pool.size());
    const Tensor pool_g = on_gpu(Tensor::from_vector(pool)), sl_g = on_gpu(Tensor::from_vector(sl));
    const Tensor ptr_g = on_gpu(i32_filled(bs + 1)), idx_g = on_gpu(i32_filled(capacity)), err_g = on_gpu(i32_filled(1));
    cuda::build_kv_indices(r2t_g.data<int32_t>(), max_reqs, max_ctx, max_ctx, pool_g.data<int32_t>(),
                           sl_g.data<int32_t>(), bs, page_size, ptr_g.data<int32_t>(), idx_g.data<int32_t>(), capacity,
                           err_g.data<int32_t>());
    return err_g.to(Device::cpu()).data<int32_t>()[0];
  };
  EXPECT_EQ(run({1, 2, 3}, {32, 17, 0}, 4), 0);
  EXPECT_EQ(run({1, 4, 3}, {32, 17, 0}, 8), 2);   // pool index 4 >= max_reqs
  EXPECT_EQ(run({1, 2, -1}, {32, 17, 0}, 8), 3);  // negative pool index
  EXPECT_EQ(run({1, 2, 3}, {33, 17, 0}, 8), 1);   // seq_len > max_ctx
  EXPECT_EQ(run({1, 2, 3}, {32, 17, 5}, 4), 3);   // 5 pages > capacity 4
}

// ---- timings (printed, not asserted) -----------------------------------------------------------------

struct GpuTimer {
  cudaEvent_t start{}, stop{};
  GpuTimer() {
    cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~GpuTimer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  template <typename F>
  double seconds_per_run(int runs, F&& fn) {
    fn();  // warm-up
    cuda_ok(cudaDeviceSynchronize(), "warm-up");
    cuda_ok(cudaEventRecord(start), "cudaEventRecord");
    for (int i = 0; i < runs; ++i) fn();
    cuda_ok(cudaEventRecord(stop), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms / 1000.0 / runs;
  }
};

// Runs cuda::paged_attention directly (the plan from the host copy, no per-call host transfers).
// cache_pad > 0 passes the caches as padded views (see padded_gpu_cache: the scalar kernels).
struct DirectCall {
  GpuProblem g;
  cpu::PagedBatch db;
  cpu::AttnConfig cfg;
  cuda::AttentionPlan plan;
  Tensor out;
  explicit DirectCall(const Problem& pr, int64_t cache_pad = 0) : g(pr), out(poisoned_gpu_out(pr)) {
    if (cache_pad > 0) {
      g.k = padded_gpu_cache(pr.k, cache_pad);
      g.v = padded_gpu_cache(pr.v, cache_pad);
    }
    cpu::PagedBatch hb;
    hb.batch_size = static_cast<int64_t>(pr.b.seq_lens.size());
    hb.qo_indptr = pr.b.qo_indptr.data();
    hb.seq_lens = pr.b.seq_lens.data();
    plan = cuda::make_attention_plan(hb);
    db = hb;
    db.qo_indptr = g.qo.data<int32_t>();
    db.kv_indptr = g.kv.data<int32_t>();
    db.kv_indices = g.idx.data<int32_t>();
    db.seq_lens = g.sl.data<int32_t>();
    db.num_pages_indexed = g.idx.size(0);
    db.page_size = pr.page_size;
    db.num_slots = g.k.size(0);
    db.num_tokens = pr.b.num_tokens;
    cfg.num_qo_heads = pr.hq;
    cfg.num_kv_heads = pr.hk;
    cfg.head_dim = pr.d;
    cfg.scale = pr.p.scale;
    cfg.k_scale = pr.p.k_scale;
    cfg.v_scale = pr.p.v_scale;
  }
  void operator()() const {
    auto rows = [](const Tensor& t) { return cpu::AttnRows{t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; };
    cuda::paged_attention(rows(g.q), rows(g.k), rows(g.v), db, cfg, plan, out.data<float>(), out.stride(0),
                          out.stride(1));
  }
};

// The tuned head sizes 128 and 64 next to the padded 96 and 80 (which do the arithmetic of 128).
TEST(AttentionCudaTiming, DISABLED_Decode) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  for (int64_t d : {128, 96, 80, 64}) {
    // bf16, 8 kv heads x d; 32 requests x 2048 tokens (256 MiB of K+V at d = 128).
    const int64_t bs = 32, len = 2048;
    const Problem pr = make_problem(rng, std::vector<std::pair<int32_t, int32_t>>(bs, {len, 1}), 16, 8, 4, d,
                                    DType::kBF16);
    const double kv_bytes = 2.0 * bs * len * pr.hk * pr.d * 2;
    DirectCall call(pr);
    GpuTimer timer;
    const double t_attn = timer.seconds_per_run(20, call);
    void *src = nullptr, *dst = nullptr;
    cuda_ok(cudaMalloc(&src, static_cast<size_t>(kv_bytes)), "cudaMalloc");
    cuda_ok(cudaMalloc(&dst, static_cast<size_t>(kv_bytes)), "cudaMalloc");
    const double t_copy = timer.seconds_per_run(20, [&] {
      cuda_ok(cudaMemcpyAsync(dst, src, static_cast<size_t>(kv_bytes), cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    });
    cudaFree(src);
    cudaFree(dst);
    const double attn_gbs = kv_bytes / t_attn / 1e9, copy_gbs = 2 * kv_bytes / t_copy / 1e9;
    std::printf("decode bs %lld len %lld hq %lld hk %lld d %lld bf16: %.3f ms, KV read %.1f GB/s; memcpy d2d of the "
                "same bytes %.3f ms, %.1f GB/s (read+write); ratio %.2f\n",
                static_cast<long long>(bs), static_cast<long long>(len), static_cast<long long>(pr.hq),
                static_cast<long long>(pr.hk), static_cast<long long>(d), t_attn * 1e3, attn_gbs, t_copy * 1e3,
                copy_gbs, attn_gbs / copy_gbs);
  }
}

// FP8 (e4m3) caches against bf16 ones on the same shape (Llama-3.1-8B's 8 kv heads x 128, group 4):
// the tensor-core kernel, and the scalar kernel (padded cache rows); RADIXLM_FP8_DECODE_MMA=0 gives
// the vectorised kernel in place of the tensor-core one.
// The FP8 cache holds half the bytes, so at long contexts its time should be about half bf16's.
TEST(AttentionCudaTiming, DISABLED_DecodeFp8) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  for (auto [bs, len] : {std::pair<int64_t, int32_t>{32, 2048}, {8, 8192}, {128, 1024}, {1, 32768}}) {
    double t_bf16 = 0;
    for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
      const Problem pr =
          make_problem(rng, std::vector<std::pair<int32_t, int32_t>>(bs, {len, 1}), 16, 8, 4, 128, dt);
      const double kv_bytes = 2.0 * bs * len * pr.hk * pr.d * static_cast<double>(dtype_size(dt));
      GpuTimer timer;
      for (int64_t pad : {0, 4}) {
        if (dt == DType::kBF16 && pad > 0) continue;
        DirectCall call(pr, pad);
        const double t = timer.seconds_per_run(20, call);
        if (dt == DType::kBF16) t_bf16 = t;
        std::printf(
            "decode bs %lld len %lld hq %lld hk %lld d 128 %s (%s kernel): %.3f ms, KV read %.1f GB/s, "
            "time / bf16's %.2f\n",
            static_cast<long long>(bs), static_cast<long long>(len), static_cast<long long>(pr.hq),
            static_cast<long long>(pr.hk), dtype_name(dt),
            pad > 0                ? "scalar"
            : dt == DType::kF8E4M3 ? "tensor-core"
                                   : "vectorised",
            t * 1e3, kv_bytes / t / 1e9, t / t_bf16);
      }
    }
  }
}

TEST(AttentionCudaTiming, DISABLED_Prefill4k) {
  SKIP_WITHOUT_CUDA();
  TestRng rng;
  for (int64_t d : {128, 96, 80, 64}) {
    const int64_t len = 4096;
    const Problem pr = make_problem(rng, {{static_cast<int32_t>(len), static_cast<int32_t>(len)}}, 16, 8, 4, d,
                                    DType::kBF16);
    DirectCall call(pr);
    GpuTimer timer;
    const double t = timer.seconds_per_run(5, call);
    const double flops = 4.0 * pr.hq * pr.d * (static_cast<double>(len) * (len + 1) / 2);
    std::printf("prefill causal %lld tokens hq %lld hk %lld d %lld bf16: %.3f ms, %.2f TFLOPS\n",
                static_cast<long long>(len), static_cast<long long>(pr.hq), static_cast<long long>(pr.hk),
                static_cast<long long>(d), t * 1e3, flops / t / 1e12);
  }
}

}  // namespace
}  // namespace rlm
