// Split-KV paged decode (one query token per request), GQA-aware, three kernels:
//  - decode_vec_kernel (decode_vec_kernel.cuh): 16-byte loads, per-request even splits computed on
//    the device, per-slot online softmax in registers; used for f32/bf16/f16/FP8 (e4m3) caches
//    whose base, token and head strides are 16-byte aligned, which contiguous caches always are
//    (head sizes are multiples of 16). head_dim 64/128/256 (q/k and v alike) have their own
//    instantiations; every other size runs the padded ones of paged_attention_decode_padded.cu
//    (bf16/f16/FP8).
//  - decode_split_kernel below (scalar loads, splits of a host-computed size): f32 caches of the
//    padded sizes and caches whose strides are not 16-byte aligned. It is instantiated for widths
//    64, 128 and 256 and masks the columns past the call's head sizes at run time.
//  - decode_mma_kernel (decode_mma_kernel.cuh): aligned caches of head_dim 64 / 128 on sm_80+,
//    FP8 always, bf16 / f16 for groups of 3 or more q heads a kv head (decode_mma16); the
//    vectorised kernel's splits and merge, the products on the tensor cores.
// All write each split's normalised partial output and log-sum-exp to a workspace that
// merge_kernel (or, for the vectorised and tensor-core kernels, the last block of the request's
// splits) combines.
// FP8 caches: all three sum raw e4m3 values, with k_scale folded into the score scale and v_scale
// applied to the output as it is written (DeviceArgs::out_scale).
#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <mutex>

#include "core/env.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/decode_mma_kernel.cuh"
#include "kernels/cuda/decode_vec_kernel.cuh"
#include "kernels/cuda/paged_attention.h"

namespace rlm::cuda {

namespace attn {

int* decode_merge_counters(int64_t count) {
  constexpr int64_t kCounters = int64_t{1} << 16;
  static std::array<std::atomic<int*>, 64> buffers{};
  static std::mutex mutex;
  int device = 0;
  RLM_CUDA_ATTN_CHECK(cudaGetDevice(&device));
  if (count > kCounters || device < 0 || device >= static_cast<int>(buffers.size())) return nullptr;
  if (int* p = buffers[device].load(std::memory_order_acquire)) return p;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RLM_CUDA_ATTN_CHECK(cudaStreamIsCapturing(current_stream(), &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (int* p = buffers[device].load(std::memory_order_acquire)) return p;
  void* p = nullptr;
  RLM_CUDA_ATTN_CHECK(cudaMalloc(&p, kCounters * sizeof(int)));
  RLM_CUDA_ATTN_CHECK(cudaMemsetAsync(p, 0, kCounters * sizeof(int), current_stream()));
  buffers[device].store(static_cast<int*>(p), std::memory_order_release);
  return static_cast<int*>(p);
}

}  // namespace attn

namespace {

using namespace attn;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 64;         // keys per tile (2 per lane in the softmax phase)
constexpr int kMaxHeads = 8;      // qo heads per block

// Workspace: partial[((r * num_qo_heads + h) * num_splits + s) * D + c], lse[(r * num_qo_heads + h) *
// num_splits + s]. A split without visible keys writes lse = -inf and zeros. D is the width
// (padded_head_dim): q/k columns past a.head_dim count as zeros, v columns past a.v_head_dim are
// neither read nor written.
template <int D, typename T, bool kWindow, typename Cap>
__global__ void __launch_bounds__(kThreads)
    decode_split_kernel(DeviceArgs a, Cap cap, int heads_per_block, int num_splits, int split_size, float* partial,
                        float* lse) {
  static_assert(D % 32 == 0, "head_dim must be a multiple of 32");
  constexpr int kPerLane = D / 32;
  constexpr int kCols = D >= kThreads ? D / kThreads : 1;  // output columns per thread
  __shared__ float s_q[kMaxHeads][D];
  __shared__ float s_p[kMaxHeads][kTile];
  __shared__ float s_m[kMaxHeads], s_l[kMaxHeads], s_alpha[kMaxHeads];
  pdl_wait();
  pdl_launch_dependents();

  const int split = blockIdx.x;
  const int group = a.num_qo_heads / a.num_kv_heads;
  const int head_blocks = group / heads_per_block;
  const int kv_head = blockIdx.y / head_blocks;
  const int h0 = kv_head * group + (blockIdx.y % head_blocks) * heads_per_block;
  const int hb = heads_per_block;
  const int r = blockIdx.z;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  const int seq_len = a.seq_lens[r];
  const int pos = seq_len - 1;
  const int lo = kWindow ? max(0, pos - a.sliding_window + 1) : 0;
  const int ss = split_size > 0 ? split_size : (seq_len + num_splits - 1) / num_splits;  // <= 0: per request
  const int k_begin = max(lo, split * ss);
  const int k_end = min(seq_len, (split + 1) * ss);
  const int row = a.qo_indptr[r];
  const int32_t* pages = a.kv_indices + a.kv_indptr[r];
  const T* kc = static_cast<const T*>(a.k);
  const T* vc = static_cast<const T*>(a.v);

  const int hd = a.head_dim, vd = a.v_head_dim;
  for (int i = tid; i < hb * D; i += kThreads) {
    const int h = i / D, c = i % D;
    s_q[h][c] = c < hd ? a.q[static_cast<int64_t>(row) * a.q_ts + static_cast<int64_t>(h0 + h) * a.q_hs + c] : 0.0f;
  }
  if (tid < kMaxHeads) {
    s_m[tid] = kNegInf;
    s_l[tid] = 0.0f;
    s_alpha[tid] = 1.0f;
  }
  float acc[kCols][kMaxHeads];
#pragma unroll
  for (int n = 0; n < kCols; ++n) {
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) acc[n][h] = 0.0f;
  }

  for (int t0 = k_begin; t0 < k_end; t0 += kTile) {
    __syncthreads();  // s_q ready (first pass); s_p/s_alpha of the previous tile consumed
    // Scores: one warp per key, lanes over head_dim.
    for (int j = warp; j < kTile; j += kWarps) {
      const int key = t0 + j;
      if (key < k_end) {
        const T* kr = kc + slot_of(pages, a.page_size, key) * a.k_ts + static_cast<int64_t>(kv_head) * a.k_hs;
        float kv[kPerLane];
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) kv[e] = lane + 32 * e < hd ? load_f32(kr + lane + 32 * e) : 0.0f;
        for (int h = 0; h < hb; ++h) {
          float part = 0.0f;
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) part += s_q[h][lane + 32 * e] * kv[e];
          part = warp_sum(part);
          if (lane == 0) s_p[h][j] = cap(part * a.scale);
        }
      } else if (lane == 0) {
        for (int h = 0; h < hb; ++h) s_p[h][j] = kNegInf;
      }
    }
    __syncthreads();
    // Online softmax: one warp per head; key t0 is visible, so every tile max is finite.
    for (int h = warp; h < hb; h += kWarps) {
      const float m_old = s_m[h];
      const float x0 = s_p[h][lane], x1 = s_p[h][lane + 32];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
      const float p0 = expf(x0 - m_new), p1 = expf(x1 - m_new);
      const float sum = warp_sum(p0 + p1);
      s_p[h][lane] = p0;
      s_p[h][lane + 32] = p1;
      __syncwarp();
      if (lane == 0) {
        const float alpha = expf(m_old - m_new);
        s_alpha[h] = alpha;
        s_l[h] = s_l[h] * alpha + sum;
        s_m[h] = m_new;
      }
    }
    __syncthreads();
    // Weighted sum of V: each thread owns output columns for all heads of the block.
    const int n_keys = min(kTile, k_end - t0);
#pragma unroll
    for (int n = 0; n < kCols; ++n) {
      const int c = tid + n * kThreads;
      if (c < vd) {
#pragma unroll
        for (int h = 0; h < kMaxHeads; ++h) {
          if (h < hb) acc[n][h] *= s_alpha[h];
        }
        for (int j = 0; j < n_keys; ++j) {
          const T* vr = vc + slot_of(pages, a.page_size, t0 + j) * a.v_ts + static_cast<int64_t>(kv_head) * a.v_hs;
          const float v = load_f32(vr + c);
#pragma unroll
          for (int h = 0; h < kMaxHeads; ++h) {
            if (h < hb) acc[n][h] += s_p[h][j] * v;
          }
        }
      }
    }
  }
  __syncthreads();  // final s_m/s_l visible (also when the split had no keys)
  const bool empty = k_begin >= k_end;
#pragma unroll
  for (int n = 0; n < kCols; ++n) {
    const int c = tid + n * kThreads;
    if (c < vd) {
#pragma unroll
      for (int h = 0; h < kMaxHeads; ++h) {
        if (h < hb) {
          const int64_t w = (static_cast<int64_t>(r) * a.num_qo_heads + h0 + h) * num_splits + split;
          partial[w * D + c] = empty ? 0.0f : acc[n][h] / s_l[h];
        }
      }
    }
  }
  if (tid < hb) {
    const int64_t w = (static_cast<int64_t>(r) * a.num_qo_heads + h0 + tid) * num_splits + split;
    lse[w] = empty ? kNegInf : s_m[tid] + logf(s_l[tid]);
  }
}

template <int D, typename T, bool kWindow, typename Cap>
void launch(const DeviceArgs& a, Cap cap, int heads_per_block, int num_splits, int split_size, float* partial,
            float* lse) {
  const dim3 grid(num_splits, a.num_kv_heads * (a.num_qo_heads / a.num_kv_heads / heads_per_block), a.batch_size);
  launch_pdl(decode_split_kernel<D, T, kWindow, Cap>, grid, dim3(kThreads), 0, current_stream(), a, cap,
             heads_per_block, num_splits, split_size, partial, lse);
  launch_pdl(merge_kernel<D>, dim3(a.num_qo_heads, a.batch_size), dim3(D), 0, current_stream(), a, num_splits,
             partial, lse);
}

template <int D, typename T>
void launch_variant(const DeviceArgs& a, int heads_per_block, int num_splits, int split_size, float* partial,
                    float* lse) {
  const bool window = a.sliding_window > 0;
  if (a.soft_cap > 0.0f) {
    const SoftCap cap{a.soft_cap};
    if (window) launch<D, T, true>(a, cap, heads_per_block, num_splits, split_size, partial, lse);
    else launch<D, T, false>(a, cap, heads_per_block, num_splits, split_size, partial, lse);
  } else {
    const NoSoftCap cap{0.0f};
    if (window) launch<D, T, true>(a, cap, heads_per_block, num_splits, split_size, partial, lse);
    else launch<D, T, false>(a, cap, heads_per_block, num_splits, split_size, partial, lse);
  }
}

template <int D>
void launch_dtype(DType dtype, const DeviceArgs& a, int heads_per_block, int num_splits, int split_size,
                  float* partial, float* lse) {
  switch (dtype) {
    case DType::kF32: return launch_variant<D, float>(a, heads_per_block, num_splits, split_size, partial, lse);
    case DType::kBF16:
      return launch_variant<D, __nv_bfloat16>(a, heads_per_block, num_splits, split_size, partial, lse);
    case DType::kF16: return launch_variant<D, __half>(a, heads_per_block, num_splits, split_size, partial, lse);
    case DType::kF8E4M3:
      return launch_variant<D, __nv_fp8_e4m3>(a, heads_per_block, num_splits, split_size, partial, lse);
    default: fail(str("cuda::paged_attention_decode: unsupported cache dtype ", dtype_name(dtype)));
  }
}

// ---- the vectorised kernel ----

// FP8 caches of head_dim 64 / 128 take the tensor-core kernel (decode_mma_kernel.cuh) on sm_80+ unless
// RADIXLM_FP8_DECODE_MMA=0 is in the environment (the vectorised kernel: the reference for its speed).
bool fp8_decode_mma() {
  static const bool on = env_switch_on("RADIXLM_FP8_DECODE_MMA");
  return on;
}

// bf16 / f16 caches of head_dim 64 / 128 take the tensor-core kernel on sm_80+ (the chunks loaded
// into registers) where it reads faster than the vectorised kernel: at head_dim 128 every group
// whose blocks hold 3 to 8 heads (decode_mma_heads), at 64 the same but 4. H200, 2,048 keys, batch
// 32-256, ratio to copy (docs/perf/decode_kernels.md, twenty-fourth section): head_dim 128, group 3
// 0.83-0.90 against 0.64 (3 one-head blocks), 4 0.81-0.90 against 0.80-0.87, 5 and 8 0.81-0.90
// against 0.37-0.49 (one-head blocks; FMA-bound 8-head blocks); head_dim 64, groups 3, 5, 8
// 0.58-0.75 against 0.35-0.60, group 4 0.60-0.75 against 0.72-0.80. Groups of 1 and 2 stay on the
// vectorised kernel (group 2 at 128: 0.90-0.98 against 0.84-0.90). RADIXLM_DECODE_MMA16=0 keeps
// every group on the vectorised kernel (the reference), =1 sends every group to the tensor-core one.
template <int D>
bool decode_mma16(const DeviceArgs& a) {
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();  // no value a user could set
  static const int64_t forced = env_int64("RADIXLM_DECODE_MMA16", kUnset);
  RLM_CHECK(forced == kUnset || forced == 0 || forced == 1)
      << "RADIXLM_DECODE_MMA16 must be 0 or 1, not " << forced;
  if (forced == 0) return false;
  const int nh = decode_mma_heads(a.num_qo_heads / a.num_kv_heads);
  const bool faster = D == 128 ? nh >= 3 : nh == 3 || nh >= 5;
  return (forced == 1 || faster) && tensor_core_device();
}

bool vec_aligned(const cpu::AttnRows& c) {
  const int64_t elems = 16 / static_cast<int64_t>(dtype_size(c.dtype));  // elements per 16 bytes
  return reinterpret_cast<uintptr_t>(c.data) % 16 == 0 && c.token_stride % elems == 0 && c.head_stride % elems == 0;
}

// The tuned sizes (the !kPadded instantiations).
template <int D>
void launch_vec_dtype(DType dtype, const DeviceArgs& a, int requested_splits, int64_t max_seq_len) {
  switch (dtype) {
    case DType::kF32: return launch_vec_cap<D, float, false>(a, requested_splits, max_seq_len);
    case DType::kBF16:
      if constexpr (D <= 128) {
        if (decode_mma16<D>(a)) return launch_mma_cap<D, __nv_bfloat16>(a, requested_splits, max_seq_len);
      }
      return launch_vec_cap<D, __nv_bfloat16, false>(a, requested_splits, max_seq_len);
    case DType::kF16:
      if constexpr (D <= 128) {
        if (decode_mma16<D>(a)) return launch_mma_cap<D, __half>(a, requested_splits, max_seq_len);
      }
      return launch_vec_cap<D, __half, false>(a, requested_splits, max_seq_len);
    case DType::kF8E4M3:
      if constexpr (D <= 128) {
        if (fp8_decode_mma() && tensor_core_device())
          return launch_mma_cap<D, __nv_fp8_e4m3>(a, requested_splits, max_seq_len);
      }
      return launch_vec_cap<D, __nv_fp8_e4m3, false>(a, requested_splits, max_seq_len);
    default: fail(str("cuda::paged_attention_decode: unsupported cache dtype ", dtype_name(dtype)));
  }
}

}  // namespace

void paged_attention_decode(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                            const cpu::PagedBatch& device_batch, const cpu::AttnConfig& cfg, const AttentionPlan& plan,
                            float* out, int64_t out_token_stride, int64_t out_head_stride, int num_kv_splits) {
  RLM_CHECK(plan.all_decode) << "cuda::paged_attention_decode: every request must have exactly one query";
  RLM_CHECK(plan.max_seq_len >= 1) << "cuda::paged_attention_decode: empty sequences";
  if (device_batch.batch_size == 0) return;
  RLM_CHECK(device_batch.batch_size <= 65535) << "cuda::paged_attention_decode: batch of "
                                              << device_batch.batch_size << " requests is over 65535";
  check_head_dims("cuda::paged_attention_decode", cfg);
  DeviceArgs a = make_device_args(q, k_cache, v_cache, device_batch, cfg, out, out_token_stride, out_head_stride);
  // FP8 caches: both kernels apply v_scale as they write the output (the value scale_attention_output
  // would give: the same product of the same f32 numbers).
  if (k_cache.dtype == DType::kF8E4M3) a.out_scale = cfg.v_scale;
  // f32 caches of the padded sizes take the scalar kernel.
  const bool tuned = tuned_head_dim(cfg);
  const int width = padded_head_dim(cfg);
  if ((tuned || k_cache.dtype != DType::kF32) && vec_aligned(k_cache) && vec_aligned(v_cache)) {
    if (!tuned) return launch_vec_padded(k_cache.dtype, a, width, num_kv_splits, plan.max_seq_len);
    switch (cfg.head_dim) {
      case 64: return launch_vec_dtype<64>(k_cache.dtype, a, num_kv_splits, plan.max_seq_len);
      case 128: return launch_vec_dtype<128>(k_cache.dtype, a, num_kv_splits, plan.max_seq_len);
      default: return launch_vec_dtype<256>(k_cache.dtype, a, num_kv_splits, plan.max_seq_len);
    }
  }
  const int group = static_cast<int>(cfg.num_qo_heads / cfg.num_kv_heads);
  int heads_per_block = std::min(group, kMaxHeads);
  while (group % heads_per_block != 0) --heads_per_block;
  const int num_splits = attn::decode_split_count(num_kv_splits, device_batch.batch_size, plan.max_seq_len);
  // A fixed split count (num_kv_splits > 0) sizes each request's splits on the device from its own
  // seq_len, so the launch does not depend on the batch's lengths (CUDA graphs).
  const int64_t split_size = num_kv_splits > 0 ? 0 : (plan.max_seq_len + num_splits - 1) / num_splits;
  RLM_CHECK(split_size * num_splits <= std::numeric_limits<int32_t>::max())
      << "cuda::paged_attention_decode: sequence of " << plan.max_seq_len << " keys is too long";
  const int64_t rows = device_batch.batch_size * cfg.num_qo_heads * num_splits;
  const AsyncBuffer buf(static_cast<size_t>(rows * (width + 1)) * sizeof(float));
  float* ws = static_cast<float*>(buf.data());
  float* partial = ws;
  const int split = static_cast<int>(split_size);
  float* lse = ws + rows * width;
  switch (width) {
    case 64: launch_dtype<64>(k_cache.dtype, a, heads_per_block, num_splits, split, partial, lse); break;
    case 128: launch_dtype<128>(k_cache.dtype, a, heads_per_block, num_splits, split, partial, lse); break;
    default: launch_dtype<256>(k_cache.dtype, a, heads_per_block, num_splits, split, partial, lse); break;
  }
}

}  // namespace rlm::cuda
