// Extend/prefill over a paged KV cache, two kernels:
//  - prefill_tc_kernel (prefill_tc_kernel.cuh): tensor cores (mma.sync m16n8k16, q rounded to the
//    cache's 16-bit type, f32 accumulation) for bf16/f16 caches whose base is 16-byte aligned and
//    whose token and head strides are multiples of 8 elements (contiguous caches always are), on
//    sm_80 and later; head_dim 64/128/256 (q/k and v alike) have their own instantiations, every
//    other size runs the padded ones of paged_attention_prefill_padded.cu. FP8 (e4m3) caches with
//    the same alignment run it too, widened to f16 in shared memory (q and P in f16;
//    paged_attention_prefill_fp8.cu);
//  - prefill_kernel below (plain FMA, everything f32): f32 caches and the other cases, at width
//    64, 128 or 256 (padded_head_dim) with the columns past the call's head sizes masked at run
//    time (zeros in shared memory, no output past v_head_dim).
// prefill_kernel: grid (ceil(max_qo_len / kRows), num_qo_heads, bs): a block takes kRows
// consecutive queries of one request and one qo head, walks the visible keys in tiles of kKeys(D)
// rows gathered through the page table into shared memory (widened to f32), and keeps an online
// softmax per query row. Decode batches run here too (qo_len == 1) when the split-KV kernel does
// not apply.
#include <algorithm>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/prefill_tc_kernel.cuh"
#include "kernels/cuda/paged_attention.h"

namespace rlm::cuda {
namespace {

using namespace attn;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;  // queries per block

template <int D>
struct Tiles {
  static constexpr int kKeys = 4096 / D;  // keys per tile: 64, 32, 16
  static constexpr int kStride = D + 1;   // padded K/V rows: the score loop reads columns of K
  static constexpr int kCStep = D < kThreads ? D : kThreads;
  static constexpr int kCols = D / kCStep;             // output columns per thread
  static constexpr int kRStep = kThreads / kCStep;
  static constexpr int kRowsPerThread = kRows / kRStep;
  static constexpr size_t kSmemFloats = size_t{kRows} * D + 2 * size_t{kKeys} * kStride + size_t{kRows} * kKeys + 3 * kRows;
  static constexpr size_t kSmemBytes = kSmemFloats * sizeof(float);
  static_assert(kKeys <= 64, "the softmax phase handles at most 64 keys per tile");
};

template <int D, typename T, bool kWindow, typename Cap>
__global__ void __launch_bounds__(kThreads) prefill_kernel(DeviceArgs a, Cap cap) {
  using Tl = Tiles<D>;
  constexpr int kKeys = Tl::kKeys, kStride = Tl::kStride;
  extern __shared__ float smem[];
  float* s_q = smem;                         // [kRows][D]
  float* s_k = s_q + kRows * D;              // [kKeys][kStride]
  float* s_v = s_k + kKeys * kStride;        // [kKeys][kStride]
  float* s_s = s_v + kKeys * kStride;        // [kRows][kKeys] scores, then probabilities
  float* s_m = s_s + kRows * kKeys;          // [kRows]
  float* s_l = s_m + kRows;                  // [kRows]
  float* s_alpha = s_l + kRows;              // [kRows]

  const int r = blockIdx.z, h = blockIdx.y;
  const int qo_begin = a.qo_indptr[r];
  const int qo_len = a.qo_indptr[r + 1] - qo_begin;
  const int q0 = blockIdx.x * kRows;
  if (q0 >= qo_len) return;  // uniform for the block, before any barrier
  const int n_rows = min(kRows, qo_len - q0);
  const int seq_len = a.seq_lens[r];
  const int pos0 = seq_len - qo_len + q0;  // position of the block's first query
  const int kb = a.kv_begin != nullptr ? a.kv_begin[r] : 0;
  const int k_lo = max(kWindow ? max(0, pos0 - a.sliding_window + 1) : 0, kb);
  // keys [k_lo, k_hi) are visible to some row
  const int k_hi = a.kv_end != nullptr ? min(pos0 + n_rows, a.kv_end[r]) : pos0 + n_rows;
  const int kv_head = h / (a.num_qo_heads / a.num_kv_heads);
  const int32_t* pages = a.kv_indices + a.kv_indptr[r];
  const T* kc = static_cast<const T*>(a.k);
  const T* vc = static_cast<const T*>(a.v);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int hd = a.head_dim, vd = a.v_head_dim;

  for (int i = tid; i < kRows * D; i += kThreads) {
    const int row = i / D, c = i % D;
    s_q[i] = row < n_rows && c < hd ? a.q[static_cast<int64_t>(qo_begin + q0 + row) * a.q_ts + static_cast<int64_t>(h) * a.q_hs + c]
                          : 0.0f;
  }
  if (tid < kRows) {
    s_m[tid] = kNegInf;
    s_l[tid] = 0.0f;
    s_alpha[tid] = 1.0f;
  }
  const int c0 = tid % Tl::kCStep, r0 = tid / Tl::kCStep;
  float acc[Tl::kRowsPerThread][Tl::kCols];
#pragma unroll
  for (int i = 0; i < Tl::kRowsPerThread; ++i) {
#pragma unroll
    for (int n = 0; n < Tl::kCols; ++n) acc[i][n] = 0.0f;
  }

  for (int t0 = k_lo; t0 < k_hi; t0 += kKeys) {
    __syncthreads();  // previous tile's s_k/s_v/s_s consumed; s_q/s_m ready on the first pass
    for (int i = tid; i < kKeys * D; i += kThreads) {
      const int j = i / D, c = i % D, key = t0 + j;
      float kx = 0.0f, vx = 0.0f;
      if (key < k_hi) {
        const int64_t slot = slot_of(pages, a.page_size, key);
        if (c < hd) kx = load_f32(kc + slot * a.k_ts + static_cast<int64_t>(kv_head) * a.k_hs + c);
        if (c < vd) vx = load_f32(vc + slot * a.v_ts + static_cast<int64_t>(kv_head) * a.v_hs + c);
      }
      s_k[j * kStride + c] = kx;
      s_v[j * kStride + c] = vx;
    }
    __syncthreads();
    for (int e = tid; e < kRows * kKeys; e += kThreads) {
      const int row = e / kKeys, j = e % kKeys, key = t0 + j;
      const int pos = pos0 + row;
      bool visible = row < n_rows && key <= pos && key < k_hi;
      if (kWindow) visible = visible && key > pos - a.sliding_window;
      float s = kNegInf;
      if (visible) {
        float dot = 0.0f;
#pragma unroll 8
        for (int c = 0; c < D; ++c) dot += s_q[row * D + c] * s_k[j * kStride + c];
        s = cap(dot * a.scale);
      }
      s_s[e] = s;
    }
    __syncthreads();
    for (int row = warp; row < kRows; row += kWarps) {
      const float m_old = s_m[row];
      const float x0 = lane < kKeys ? s_s[row * kKeys + lane] : kNegInf;
      const float x1 = lane + 32 < kKeys ? s_s[row * kKeys + lane + 32] : kNegInf;
      const float m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
      const bool none = m_new == kNegInf;  // nothing visible to this row yet
      const float p0 = none ? 0.0f : expf(x0 - m_new), p1 = none ? 0.0f : expf(x1 - m_new);
      const float sum = warp_sum(p0 + p1);
      if (lane < kKeys) s_s[row * kKeys + lane] = p0;
      if (lane + 32 < kKeys) s_s[row * kKeys + lane + 32] = p1;
      __syncwarp();
      if (lane == 0) {
        const float alpha = none ? 1.0f : expf(m_old - m_new);
        s_alpha[row] = alpha;
        s_l[row] = s_l[row] * alpha + sum;
        s_m[row] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < Tl::kRowsPerThread; ++i) {
      const int row = r0 + i * Tl::kRStep;
      const float alpha = s_alpha[row];
      float o[Tl::kCols];
#pragma unroll
      for (int n = 0; n < Tl::kCols; ++n) o[n] = acc[i][n] * alpha;
      for (int j = 0; j < kKeys; ++j) {
        const float p = s_s[row * kKeys + j];
#pragma unroll
        for (int n = 0; n < Tl::kCols; ++n) o[n] += p * s_v[j * kStride + c0 + n * Tl::kCStep];
      }
#pragma unroll
      for (int n = 0; n < Tl::kCols; ++n) acc[i][n] = o[n];
    }
  }
  __syncthreads();  // final s_l visible
#pragma unroll
  for (int i = 0; i < Tl::kRowsPerThread; ++i) {
    const int row = r0 + i * Tl::kRStep;
    if (row < n_rows) {
      const float l = s_l[row];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key (key ranges): zeros
      float* o = a.out + static_cast<int64_t>(qo_begin + q0 + row) * a.out_ts + static_cast<int64_t>(h) * a.out_hs;
#pragma unroll
      for (int n = 0; n < Tl::kCols; ++n) {
        if (c0 + n * Tl::kCStep < vd) o[c0 + n * Tl::kCStep] = acc[i][n] * inv;
      }
      if (a.lse != nullptr && c0 == 0) {
        a.lse[static_cast<int64_t>(qo_begin + q0 + row) * a.lse_ts + h] = l > 0.0f ? s_m[row] + logf(l) : kNegInf;
      }
    }
  }
}

template <int D, typename T, bool kWindow, typename Cap>
void launch(const DeviceArgs& a, Cap cap, int64_t max_qo_len) {
  auto* kernel = prefill_kernel<D, T, kWindow, Cap>;
  constexpr size_t smem = Tiles<D>::kSmemBytes;
  RLM_CUDA_ATTN_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((max_qo_len + kRows - 1) / kRows), a.num_qo_heads, a.batch_size);
  kernel<<<grid, kThreads, smem, current_stream()>>>(a, cap);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
}

template <int D, typename T>
void launch_variant(const DeviceArgs& a, int64_t max_qo_len) {
  const bool window = a.sliding_window > 0;
  if (a.soft_cap > 0.0f) {
    if (window) launch<D, T, true>(a, SoftCap{a.soft_cap}, max_qo_len);
    else launch<D, T, false>(a, SoftCap{a.soft_cap}, max_qo_len);
  } else {
    if (window) launch<D, T, true>(a, NoSoftCap{0.0f}, max_qo_len);
    else launch<D, T, false>(a, NoSoftCap{0.0f}, max_qo_len);
  }
}

template <int D>
void launch_dtype(DType dtype, const DeviceArgs& a, int64_t max_qo_len) {
  switch (dtype) {
    case DType::kF32: return launch_variant<D, float>(a, max_qo_len);
    case DType::kBF16: return launch_variant<D, __nv_bfloat16>(a, max_qo_len);
    case DType::kF16: return launch_variant<D, __half>(a, max_qo_len);
    case DType::kF8E4M3: return launch_variant<D, __nv_fp8_e4m3>(a, max_qo_len);
    default: fail(str("cuda::paged_attention_prefill: unsupported cache dtype ", dtype_name(dtype)));
  }
}

// ---- the tensor-core kernel ----

bool tc_aligned(const cpu::AttnRows& c) {
  return reinterpret_cast<uintptr_t>(c.data) % 16 == 0 && c.token_stride % 8 == 0 && c.head_stride % 8 == 0;
}

}  // namespace

void paged_attention_prefill(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                             const cpu::PagedBatch& device_batch, const cpu::AttnConfig& cfg,
                             const AttentionPlan& plan, float* out, int64_t out_token_stride,
                             int64_t out_head_stride, float* lse, int64_t lse_token_stride) {
  if (device_batch.batch_size == 0 || plan.max_qo_len == 0) return;
  RLM_CHECK(device_batch.batch_size <= 65535) << "cuda::paged_attention_prefill: batch of "
                                              << device_batch.batch_size << " requests is over 65535";
  check_head_dims("cuda::paged_attention_prefill", cfg);
  DeviceArgs a = make_device_args(q, k_cache, v_cache, device_batch, cfg, out, out_token_stride, out_head_stride);
  a.lse = lse;
  a.lse_ts = lse_token_stride;
  const DType dt = k_cache.dtype;
  const bool tc = (dt == DType::kBF16 || dt == DType::kF16 || dt == DType::kF8E4M3) && tc_aligned(k_cache) &&
                  tc_aligned(v_cache) && tensor_core_device();
  const int width = padded_head_dim(cfg);
  if (tc && dt == DType::kF8E4M3) {
    launch_tc_fp8(a, tuned_head_dim(cfg) ? static_cast<int>(cfg.head_dim) : width, !tuned_head_dim(cfg),
                  plan.max_qo_len);
  } else if (tc) {
    if (!tuned_head_dim(cfg)) return launch_tc_padded(dt, a, width, plan.max_qo_len);
    switch (cfg.head_dim) {
      case 64: return launch_tc_dtype<64, false>(dt, a, plan.max_qo_len);
      case 128: return launch_tc_dtype<128, false>(dt, a, plan.max_qo_len);
      default: return launch_tc_dtype<256, false>(dt, a, plan.max_qo_len);
    }
  } else {
    switch (width) {
      case 64: launch_dtype<64>(dt, a, plan.max_qo_len); break;
      case 128: launch_dtype<128>(dt, a, plan.max_qo_len); break;
      default: launch_dtype<256>(dt, a, plan.max_qo_len); break;
    }
  }
  scale_attention_output(k_cache, device_batch, cfg, out, out_token_stride, out_head_stride);
}

}  // namespace rlm::cuda
