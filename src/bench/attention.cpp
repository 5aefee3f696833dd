#include "bench/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/cascade_plan.h"
#include "bench/cuda_timing.h"
#include "core/tensor.h"

#ifdef RADIXLM_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/paged_attention.h"
#endif

namespace rlm::bench {

#ifdef RADIXLM_WITH_CUDA

namespace {

// The stream the timing events are recorded on.
constexpr cudaStream_t kStream = nullptr;  // the legacy default stream

Tensor gpu_i32(const std::vector<int32_t>& v) { return Tensor::from_vector(v).to(Device::cuda(0)); }

cpu::AttnRows rows(const Tensor& t) { return cpu::AttnRows{t.data_ptr(), t.dtype(), t.stride(0), t.stride(1)}; }

// One batch of `bs` requests, each with seq_len keys and qo_len queries (its last tokens), its
// pages a random permutation of the pool, on the GPU.
struct Workload {
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0}, kv_indices, seq_lens;
  Tensor q, k, v, out, qo_g, kv_g, idx_g, sl_g;
  cpu::PagedBatch batch;  // device pointers
  cpu::AttnConfig cfg;
  cuda::AttentionPlan plan;

  // shared_pages > 0: every request's first shared_pages pages are the same pages (a shared prefix).
  Workload(std::mt19937& rng, const AttentionArgs& a, DType dtype, int64_t bs, int64_t seq_len, int64_t qo_len,
           int64_t shared_pages = 0) {
    const int64_t pages_per_req = (seq_len + a.page_size - 1) / a.page_size;
    const int64_t own = pages_per_req - shared_pages;
    std::vector<int32_t> perm(static_cast<size_t>(shared_pages + bs * own));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t r = 0; r < bs; ++r) {
      kv_indices.insert(kv_indices.end(), perm.begin(), perm.begin() + shared_pages);
      kv_indices.insert(kv_indices.end(), perm.begin() + shared_pages + r * own,
                        perm.begin() + shared_pages + (r + 1) * own);
      kv_indptr.push_back(static_cast<int32_t>(kv_indices.size()));
      qo_indptr.push_back(static_cast<int32_t>(qo_indptr.back() + qo_len));
      seq_lens.push_back(static_cast<int32_t>(seq_len));
    }
    const int64_t slots = static_cast<int64_t>(perm.size()) * a.page_size;
    k = random_gpu(rng, {slots, a.num_kv_heads, a.head_dim}, dtype);
    v = random_gpu(rng, {slots, a.num_kv_heads, a.head_dim}, dtype);
    q = random_gpu(rng, {bs * qo_len, a.num_qo_heads, a.head_dim}, DType::kF32);
    out = Tensor::empty({bs * qo_len, a.num_qo_heads, a.head_dim}, DType::kF32, Device::cuda(0));
    qo_g = gpu_i32(qo_indptr);
    kv_g = gpu_i32(kv_indptr);
    idx_g = gpu_i32(kv_indices);
    sl_g = gpu_i32(seq_lens);
    cpu::PagedBatch host;
    host.batch_size = bs;
    host.qo_indptr = qo_indptr.data();
    host.seq_lens = seq_lens.data();
    plan = cuda::make_attention_plan(host);
    batch = host;
    batch.qo_indptr = qo_g.data<int32_t>();
    batch.kv_indptr = kv_g.data<int32_t>();
    batch.kv_indices = idx_g.data<int32_t>();
    batch.seq_lens = sl_g.data<int32_t>();
    batch.num_pages_indexed = static_cast<int64_t>(kv_indices.size());
    batch.page_size = a.page_size;
    batch.num_slots = slots;
    batch.num_tokens = bs * qo_len;
    cfg.num_qo_heads = a.num_qo_heads;
    cfg.num_kv_heads = a.num_kv_heads;
    cfg.head_dim = a.head_dim;
    cfg.scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  }

  void decode(int num_kv_splits) const {
    cuda::paged_attention_decode(rows(q), rows(k), rows(v), batch, cfg, plan, out.data<float>(), out.stride(0),
                                 out.stride(1), num_kv_splits);
  }
  void prefill() const {
    cuda::paged_attention_prefill(rows(q), rows(k), rows(v), batch, cfg, plan, out.data<float>(), out.stride(0),
                                  out.stride(1));
  }
  // Every output element finite (the kernels wrote them all and nothing overflowed).
  bool output_finite() const {
    const Tensor h = out.to(Device::cpu());
    const float* p = h.data<float>();
    for (int64_t i = 0; i < h.numel(); ++i) {
      if (!std::isfinite(p[i])) return false;
    }
    return true;
  }
};

}  // namespace

int run_attention(const AttentionArgs& a) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "radixlm bench attention: no CUDA device\n");
    return 2;
  }
  DType dtype;
  if (a.dtype == "bf16") {
    dtype = DType::kBF16;
  } else if (a.dtype == "f16") {
    dtype = DType::kF16;
  } else if (a.dtype == "f32") {
    dtype = DType::kF32;
  } else if (a.dtype == "fp8_e4m3") {
    dtype = DType::kF8E4M3;  // --kv-cache-dtype fp8_e4m3 (scales 1: the kernels fold them into constants)
  } else {
    std::fprintf(stderr, "radixlm bench attention: --dtype must be bf16, f16, f32 or fp8_e4m3, got %s\n",
                 a.dtype.c_str());
    return 2;
  }
  if (a.num_kv_heads <= 0 || a.num_qo_heads % a.num_kv_heads != 0) {
    std::fprintf(stderr, "radixlm bench attention: --num-qo-heads must be a multiple of --num-kv-heads\n");
    return 2;
  }
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::mt19937 rng(1234);
  nlohmann::json j;
  j["device"] = prop.name;
  j["sm_count"] = prop.multiProcessorCount;
  j["dtype"] = a.dtype;
  j["num_qo_heads"] = a.num_qo_heads;
  j["num_kv_heads"] = a.num_kv_heads;
  j["head_dim"] = a.head_dim;
  j["page_size"] = a.page_size;
  std::printf("device %s (%d SMs); %s caches, %lld q / %lld kv heads, head_dim %lld, page size %lld\n", prop.name,
              prop.multiProcessorCount, a.dtype.c_str(), static_cast<long long>(a.num_qo_heads),
              static_cast<long long>(a.num_kv_heads), static_cast<long long>(a.head_dim),
              static_cast<long long>(a.page_size));

  // ---- decode ----
  std::vector<int64_t> decode_batches = a.decode_batches;
  if (decode_batches.empty()) decode_batches.push_back(a.decode_batch);
  for (size_t bi = 0; bi < decode_batches.size(); ++bi) {
    const int64_t decode_batch = decode_batches[bi];
    const Workload w(rng, a, dtype, decode_batch, a.decode_len, 1);
    const double kv_bytes = 2.0 * static_cast<double>(decode_batch * a.decode_len * a.num_kv_heads * a.head_dim) *
                            static_cast<double>(dtype_size(dtype));
    void* dst = nullptr;
    const size_t copy_bytes = static_cast<size_t>(w.k.numel()) * dtype_size(dtype);  // = one cache; twice below
    cuda_ok(cudaMalloc(&dst, 2 * copy_bytes), "cudaMalloc");
    const double t_copy = median_seconds(a.iters, 3, kStream, [&] {
      cuda_ok(cudaMemcpyAsync(dst, w.k.data_ptr(), copy_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
      cuda_ok(cudaMemcpyAsync(static_cast<char*>(dst) + copy_bytes, w.v.data_ptr(), copy_bytes,
                              cudaMemcpyDeviceToDevice),
              "cudaMemcpyAsync");
    });
    cuda_ok(cudaFree(dst), "cudaFree");
    const double copied = 2.0 * static_cast<double>(copy_bytes);
    const double copy_gbs = 2.0 * copied / t_copy / 1e9;  // read + write
    std::printf("decode bs %lld x %lld keys: KV %.1f MiB; cudaMemcpy D2D of the caches (%.1f MiB): %.3f ms, %.0f GB/s "
                "(read+write)\n",
                static_cast<long long>(decode_batch), static_cast<long long>(a.decode_len), kv_bytes / 1048576.0,
                copied / 1048576.0, t_copy * 1e3, copy_gbs);
    nlohmann::json jd;
    jd["batch"] = decode_batch;
    jd["seq_len"] = a.decode_len;
    jd["kv_bytes"] = kv_bytes;
    jd["copy_ms"] = t_copy * 1e3;
    jd["copy_gbs"] = copy_gbs;
    // The count the engine uses for this batch (fixed_decode_num_kv_splits, with the runner's
    // context limit as the length bound; here the decode length).
    const int engine_splits = cuda::fixed_decode_num_kv_splits(decode_batch, a.decode_len);
    jd["engine_splits"] = engine_splits;
    std::printf("  %-20s %10s %10s %8s\n", "splits (*: engine)", "ms", "GB/s", "ratio");
    std::vector<int> sweep = a.decode_splits;
    if (sweep.empty()) sweep = {0, 1, 2, 3, 4, 8, 16, 32};
    if (a.decode_splits.empty() && std::find(sweep.begin(), sweep.end(), engine_splits) == sweep.end()) {
      sweep.insert(std::upper_bound(sweep.begin() + 1, sweep.end(), engine_splits), engine_splits);
    }
    for (int splits : sweep) {
      const double t = median_seconds(a.iters, 3, kStream, [&] { w.decode(splits); });
      const double gbs = kv_bytes / t / 1e9;
      const std::string name = splits == 0 ? "auto" : std::to_string(splits) + (splits == engine_splits ? "*" : "");
      std::printf("  %-20s %10.4f %10.0f %8.3f\n", name.c_str(), t * 1e3, gbs, gbs / copy_gbs);
      nlohmann::json row{{"splits", name}, {"ms", t * 1e3}, {"gbs", gbs}, {"ratio_to_copy", gbs / copy_gbs}};
      jd["runs"].push_back(row);
    }
    const bool finite = w.output_finite();
    std::printf("  output finite: %s\n", finite ? "yes" : "NO");
    jd["output_finite"] = finite;
    if (bi == 0) j["decode"] = jd;
    j["decode_batches"].push_back(jd);
  }

  if (a.decode_only) return finish_report(j, a.json_path, "bench attention");
  // ---- prefill ----
  std::printf("prefill (causal, fresh prompts):\n  %-6s %-6s %10s %10s\n", "len", "batch", "ms", "TFLOP/s");
  for (int64_t len : a.prefill_lens) {
    const int64_t bs = std::max<int64_t>(1, a.prefill_tokens / len);
    const Workload w(rng, a, dtype, bs, len, len);
    const double flops = 4.0 * static_cast<double>(a.num_qo_heads * a.head_dim) * static_cast<double>(bs) *
                         (static_cast<double>(len) * static_cast<double>(len + 1) / 2.0);
    const double t = median_seconds(a.iters, 3, kStream, [&] { w.prefill(); });
    const bool finite = w.output_finite();
    std::printf("  %-6lld %-6lld %10.3f %10.1f%s\n", static_cast<long long>(len), static_cast<long long>(bs), t * 1e3,
                flops / t / 1e12, finite ? "" : "  (output NOT finite)");
    nlohmann::json row{{"seq_len", len}, {"batch", bs}, {"ms", t * 1e3}, {"tflops", flops / t / 1e12},
                       {"output_finite", finite}};
    j["prefill"].push_back(row);
  }
  // ---- cascade: shared prefix, level 1 once for the whole batch ----
  std::printf("cascade (%lld requests sharing a %lld-token prefix, each extending it):\n  %-6s %10s %10s %8s %12s %7s\n",
              static_cast<long long>(a.cascade_batch), static_cast<long long>(a.cascade_prefix), "new", "single ms",
              "cascade ms", "speedup", "max |diff|", "chunks");
  for (int64_t n_new : a.cascade_new) {
    const int64_t prefix = a.cascade_prefix / a.page_size * a.page_size;  // whole shared pages
    const int64_t bs = a.cascade_batch, rows_total = bs * n_new;
    const Workload w(rng, a, dtype, bs, prefix + n_new, n_new, prefix / a.page_size);
    // Level 1: the group's rows over the shared prefix, split into `chunks` key chunks (entry k
    // reads copy k of the rows), as PagedAttentionBackend runs it.
    const int64_t chunks = cascade_num_chunks((rows_total + 127) / 128, prefix);
    std::vector<int32_t> l1;  // qo_indptr [chunks + 1], kv_indptr [chunks + 1], seq_lens, kv_begin, kv_end
    for (int64_t k = 0; k <= chunks; ++k) l1.push_back(static_cast<int32_t>(k * rows_total));
    for (int64_t k = 0; k <= chunks; ++k) l1.push_back(0);
    for (int64_t k = 0; k < chunks; ++k) l1.push_back(static_cast<int32_t>(prefix + rows_total));
    for (int64_t k = 0; k < chunks; ++k) l1.push_back(static_cast<int32_t>(prefix * k / chunks));
    for (int64_t k = 0; k < chunks; ++k) l1.push_back(static_cast<int32_t>(prefix * (k + 1) / chunks));
    const Tensor l1_g = gpu_i32(l1);
    const int32_t* l1p = l1_g.data<int32_t>();
    std::vector<int32_t> l2_begin(bs, static_cast<int32_t>(prefix));
    const Tensor l2b = gpu_i32(l2_begin), l2e = w.sl_g;
    cpu::PagedBatch b1 = w.batch;
    b1.batch_size = chunks;
    b1.qo_indptr = l1p;
    b1.kv_indptr = l1p + (chunks + 1);
    b1.seq_lens = l1p + 2 * (chunks + 1);
    b1.kv_begin = l1p + 2 * (chunks + 1) + chunks;
    b1.kv_end = l1p + 2 * (chunks + 1) + 2 * chunks;
    cuda::AttentionPlan p1;
    p1.max_qo_len = rows_total;
    p1.max_seq_len = prefix + rows_total;
    cpu::PagedBatch b2 = w.batch;
    b2.kv_begin = l2b.data<int32_t>();
    b2.kv_end = l2e.data<int32_t>();
    const int64_t hq = a.num_qo_heads, d = a.head_dim;
    const Tensor q1 = Tensor::empty({chunks * rows_total, hq, d}, DType::kF32, Device::cuda(0));
    const Tensor parts = Tensor::empty({chunks + 1, rows_total, hq, d}, DType::kF32, Device::cuda(0));
    const Tensor lse = Tensor::empty({chunks + 1, rows_total, hq}, DType::kF32, Device::cuda(0));
    const Tensor merged = Tensor::empty({rows_total, hq, d}, DType::kF32, Device::cuda(0));
    float* level2 = parts.data<float>() + chunks * rows_total * hq * d;
    auto cascade = [&] {
      for (int64_t k = 0; k < chunks; ++k) q1.slice(0, k * rows_total, (k + 1) * rows_total).copy_(w.q);
      cuda::paged_attention_prefill(rows(q1), rows(w.k), rows(w.v), b1, w.cfg, p1, parts.data<float>(), hq * d, d,
                                    lse.data<float>(), hq);
      cuda::paged_attention_prefill(rows(w.q), rows(w.k), rows(w.v), b2, w.cfg, w.plan, level2, hq * d, d,
                                    lse.data<float>() + chunks * rows_total * hq, hq);
      cuda::merge_attention_states(parts.data<float>(), lse.data<float>(), chunks + 1, rows_total, hq, d,
                                   merged.data<float>(), nullptr);
    };
    const double t_single = median_seconds(a.iters, 3, kStream, [&] { w.prefill(); });
    const double t_cascade = median_seconds(a.iters, 3, kStream, cascade);
    const Tensor ref = w.out.to(Device::cpu()), got = merged.to(Device::cpu());
    double max_diff = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double diff = std::abs(static_cast<double>(ref.data<float>()[i]) - got.data<float>()[i]);
      max_diff = std::isfinite(diff) ? std::max(max_diff, diff) : std::numeric_limits<double>::infinity();
    }
    std::printf("  %-6lld %10.3f %10.3f %8.2f %12.2e %7lld\n", static_cast<long long>(n_new), t_single * 1e3,
                t_cascade * 1e3, t_single / t_cascade, max_diff, static_cast<long long>(chunks));
    nlohmann::json row{{"batch", bs},           {"prefix", prefix},           {"new_tokens", n_new},
                       {"single_ms", t_single * 1e3}, {"cascade_ms", t_cascade * 1e3},
                       {"speedup", t_single / t_cascade}, {"max_abs_diff", max_diff}, {"chunks", chunks}};
    j["cascade"].push_back(row);
  }
  return finish_report(j, a.json_path, "bench attention");
}

#else

int run_attention(const AttentionArgs&) {
  std::fprintf(stderr, "radixlm bench attention: this binary was built without CUDA\n");
  return 2;
}

#endif

}  // namespace rlm::bench
