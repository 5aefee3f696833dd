// The vectorised split-KV decode kernel (one query token per request), included by
// paged_attention_decode.cu. Grid (num_splits, num_kv_heads * head_blocks, bs), kVecThreads threads.
//
// A block scores one KV split of one request against HB qo heads of one kv head (GQA: the K/V rows
// of the group are read once). Each key row is read by a "key group" of D / C lanes, each lane
// holding C (16, or 8 when HB = 8) consecutive columns in C * sizeof(T) / 16 16-byte loads (one
// 8-byte load for an FP8 cache at C = 8), so a warp reads 32 / (D / C) keys per step and the block
// kVecWarps times that (kSlots key slots). A slot walks its keys kUnroll at a time, all loads
// issued before the first use, the page ids of the next step fetched one step ahead, and keeps its
// own online softmax (max, sum, C output columns per head; rescaled only when the max grows) in
// registers: no barrier in the main loop. Before the PDL wait a block reads the lengths, the page
// table, its first step's slots and that step's K/V rows of every key but the request's last: all
// written before the layers run or by earlier forwards, never by the kernel it waits on (the KV
// store writes only the query's own key, the last), so they load while that kernel finishes.
// At the end the slots are merged through shared memory; the block writes out directly when
// num_splits == 1, else the split's normalised partial output and its log-sum-exp (natural log).
// The splits are then merged by the last of the request's blocks of the same heads to finish
// (merge_splits_if_last: a per-(request, head block) arrival counter that the last block resets
// for the next launch or graph replay), or, without a counter buffer, by merge_kernel — the same
// arithmetic in the same order.
//
// Keys of a request are divided evenly among the num_splits splits per request (on the device,
// from seq_lens), so a fixed num_splits serves any batch; a split without keys writes lse = -inf
// and skips the work (the merge skips it). Scores are in log2 units (see score_log2).
//
// Caches: f32, bf16, f16 and FP8 (e4m3), widened to f32 exactly. For FP8 the kernel sums the raw
// e4m3 values: k_scale is folded into a.scale (make_device_args) and v_scale is a.out_scale, which
// multiplies the final output as it is written (the partial rows of the splits stay unscaled).
//
// kPadded: the instantiation's width D is above the call's head sizes (a.head_dim for q/k,
// a.v_head_dim for v/out, multiples of 16): the lanes whose columns lie past a size load nothing
// and hold zeros there (a lane's C columns are all inside or all outside, C dividing 16), so the
// dot products and sums are those of the true sizes; no output column past v_head_dim is written.
// The tuned sizes (64, 128, 256, equal q/k and v) are the !kPadded instantiations.
#pragma once

#include <algorithm>
#include <cuda/atomic>
#include <type_traits>
#include <utility>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda::attn {

constexpr int kVecThreads = 128;
constexpr int kVecWarps = kVecThreads / 32;

// C consecutive cache elements of one lane as raw 32-bit words, loaded 16 bytes at a time (one
// 8-byte load when they are 8 bytes: an FP8 cache at 8 columns per lane).
template <typename T, int C>
struct RawCols {
  static constexpr int kBytes = C * static_cast<int>(sizeof(T));
  static_assert(kBytes % 16 == 0 || kBytes == 8, "a lane's columns are whole 16-byte words or 8 bytes");
  static constexpr int kWords = kBytes / 4;
  uint32_t w[kWords];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0;
  }
};

template <typename T, int C>
__device__ __forceinline__ void load_cols(const T* p, RawCols<T, C>& r) {
  if constexpr (RawCols<T, C>::kBytes % 16 == 0) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < RawCols<T, C>::kBytes / 16; ++i) {
      const uint4 x = __ldg(v + i);
      r.w[4 * i] = x.x;
      r.w[4 * i + 1] = x.y;
      r.w[4 * i + 2] = x.z;
      r.w[4 * i + 3] = x.w;
    }
  } else {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(p));
    r.w[0] = x.x;
    r.w[1] = x.y;
  }
}

__device__ __forceinline__ float2 widen2(uint32_t w, const __nv_bfloat16*) {
  __nv_bfloat162 h;
  memcpy(&h, &w, sizeof(h));
  return __bfloat1622float2(h);
}
__device__ __forceinline__ float2 widen2(uint32_t w, const __half*) {
  __half2 h;
  memcpy(&h, &w, sizeof(h));
  return __half22float2(h);
}

// The 4 e4m3 values of a word (the lowest byte first, as they lie in memory) as f32, exactly:
// every e4m3 value -- subnormals (k * 2^-9), normals up to 448, NaN -- is an f16 value (5 exponent
// and 10 mantissa bits hold e4m3's 4 and 3), and every f16 one an f32 one. e4m3x2 -> f16x2 is one
// instruction on sm_89+ (cvt.rn.f16x2.e4m3x2; cuda_fp8.h emulates it on older GPUs), f16 -> f32
// one more per value: cheaper than rebuilding the f32 bits by hand with the subnormal case.
__device__ __forceinline__ void widen4_e4m3(uint32_t w, float* x) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const __half2_raw raw =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * j)), __NV_E4M3);
    const float2 f = __half22float2(__half2(raw));
    x[2 * j] = f.x;
    x[2 * j + 1] = f.y;
  }
}

// The C raw elements as f32 (exact for every cache type: f32, bf16, f16, e4m3).
template <typename T, int C>
__device__ __forceinline__ void widen_cols(const RawCols<T, C>& r, float (&x)[C]) {
#pragma unroll
  for (int i = 0; i < RawCols<T, C>::kWords; ++i) {
    if constexpr (sizeof(T) == 4) {
      x[i] = __uint_as_float(r.w[i]);
    } else if constexpr (sizeof(T) == 2) {
      const float2 f = widen2(r.w[i], static_cast<const T*>(nullptr));
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    } else {
      static_assert(std::is_same_v<T, __nv_fp8_e4m3>, "1-byte caches are e4m3");
      widen4_e4m3(r.w[i], x + 4 * i);
    }
  }
}

// Columns per lane: 16 (fewer lanes share a key, so less of the per-key work -- page lookup,
// softmax, shuffles -- is replicated across them) unless 8 heads per block would need too many
// registers. kUnroll keys per slot per step keep 2 * kUnroll * C * sizeof(T) bytes of K and V loads
// in flight per lane. At 16 columns: 256 for f32 (2 keys) and 16-bit caches (4 keys), whose loop is
// bound by the loads' round trip -- on an H200, 4 bf16 keys a step instead of 2 read 0.79-0.88 of
// the copy bandwidth at batch 32-256 instead of 0.69-0.75 (docs/perf/decode_kernels.md,
// twenty-third section), at 4 heads a block 2 blocks a multiprocessor either way (232 -> 255
// registers) --, and 128 for FP8 (4 keys). At 8 columns (8 heads: the registers go to q and the
// accumulators) every cache takes 4 keys.
template <int D, int HB, typename T>
struct VecShape {
  static_assert(D % 64 == 0 && D <= 256, "head_dim must be 64, 128 or 256");
  static constexpr int kCols = HB >= 8 ? 8 : 16;
  static constexpr int kUnroll = kCols == 16 && sizeof(T) == 4 ? 2 : 4;  // keys per slot per step
  static constexpr int kLanesPerKey = D / kCols;           // 4..32, a power of two
  static constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  static constexpr int kSlots = kVecWarps * kKeysPerWarp;  // key slots per block
  static constexpr int kStep = kSlots * kUnroll;           // keys per block step
};

// Visible keys [lo, seq_len) of request r's single query, split s of num_splits: [begin, end).
__device__ __forceinline__ void split_range(int seq_len, int sliding_window, int num_splits, int split, int& begin,
                                            int& end) {
  const int lo = sliding_window > 0 ? max(0, seq_len - sliding_window) : 0;
  const int n = seq_len - lo;
  const int per = (n + num_splits - 1) / num_splits;
  begin = lo + split * per;
  end = min(seq_len, begin + per);
}

constexpr int kMaxDecodeSplits = 64;

// Column c of the block's head h (qo head h0 + h) of request r (query row `row`) from N partial
// softmax states in shared memory -- maxima m[n][h] (log2 domain), row sums l[n][h], accumulators
// acc[n][h][c] -- to the output (one split) or to this split's workspace row and its LSE: the
// epilogue of both split-KV decode kernels (slots here, warps in decode_mma_kernel).
template <int N, int HB, int D>
__device__ __forceinline__ void write_merged_states(const DeviceArgs& a, const float (&m)[N][HB],
                                                    const float (&l)[N][HB], const float (*acc)[HB][D], int h,
                                                    int c, int row, int r, int h0, int split, int num_splits,
                                                    float* partial, float* lse) {
  float mx = kNegInf;
#pragma unroll
  for (int n = 0; n < N; ++n) mx = fmaxf(mx, m[n][h]);
  float den = 0.0f, num = 0.0f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    const float w = fast_exp2(m[n][h] - mx);  // 0 for a state without keys (m = -inf)
    den += w * l[n][h];
    num += w * acc[n][h][c];
  }
  if (num_splits == 1) {
    a.out[static_cast<int64_t>(row) * a.out_ts + static_cast<int64_t>(h0 + h) * a.out_hs + c] =
        num / den * a.out_scale;
  } else {
    const int64_t w = (static_cast<int64_t>(r) * a.num_qo_heads + h0 + h) * num_splits + split;
    partial[w * D + c] = num / den;
    if (c == 0) lse[w] = (mx + log2f(den)) * kLn2;
  }
}

// The merge of one request's splits for qo heads h0 .. h0 + nh - 1 (nh <= HB: the block's heads),
// run by the last of their num_splits blocks to arrive (every thread of every block calls it;
// partial and lse as written by the blocks): out = sum_s exp(lse_s - M) * partial_s / sum_s
// exp(lse_s - M), skipping the splits without keys (lse = -inf; their partial rows are not
// written), summed in split order as merge_kernel sums them. counters: int [bs * gridDim.y], zero
// before the launch and after it.
template <int D, int HB>
__device__ void merge_splits_if_last(const DeviceArgs& a, int num_splits, const float* partial,
                                     const float* lse, int* counters, int r, int h0, int nh = HB) {
  __shared__ bool s_last;
  __shared__ float s_lse[HB][kMaxDecodeSplits], s_w[HB][kMaxDecodeSplits], s_den[HB];
  // The block's partial and lse rows are published by thread 0's count alone: the barrier orders
  // every thread's writes before its release, and the last block's acquire, spread to its threads
  // by the second barrier, orders the other blocks' rows before its reads (the arrive / wait
  // pattern of CUTLASS's GenericBarrier) -- no fence in every thread.
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> counter(
        counters[static_cast<int64_t>(r) * gridDim.y + blockIdx.y]);
    s_last = counter.fetch_add(1, ::cuda::memory_order_acq_rel) == num_splits - 1;
    // No other block of this launch touches it again; the next launch comes after this one ends.
    if (s_last) counter.store(0, ::cuda::memory_order_relaxed);
  }
  __syncthreads();
  if (!s_last) return;
  const int64_t base = static_cast<int64_t>(r) * a.num_qo_heads + h0;  // (request, first head) row
  const int row = a.qo_indptr[r];
  // A thread sums 4 consecutive columns of one head (v_head_dim is a multiple of 16, so the 4 are
  // all inside it or all past it) over the splits. kBatch splits' 16-byte loads go out before the
  // first is used, so the partial rows come from L2 in num_splits / kBatch round trips, not one
  // per split (one per split made this merge a large part of the kernel at small batches). 9-16
  // splits (what the split rule gives small batches of long-context models) take one round trip
  // for the log-sum-exps and the partial rows together; with 8 or fewer that path measured slower
  // than the two phases below (docs/perf/decode_kernels.md, seventeenth section). The same
  // products summed in split order either way: merge_kernel's arithmetic.
  constexpr int kBatch = 8, kOneTrip = 16;
  if (num_splits > kBatch && num_splits <= kOneTrip) {
    for (int i = threadIdx.x; i < nh * D / 4; i += blockDim.x) {
      const int h = i / (D / 4), c = (i % (D / 4)) * 4;
      if (c >= a.v_head_dim) continue;
      const float4* p = reinterpret_cast<const float4*>(partial + (base + h) * num_splits * D + c);
      float ls[kOneTrip];
      float4 x[kOneTrip];
#pragma unroll
      for (int s = 0; s < kOneTrip; ++s) {
        ls[s] = s < num_splits ? __ldcg(lse + (base + h) * num_splits + s) : kNegInf;
        x[s] = s < num_splits ? __ldcg(p + static_cast<int64_t>(s) * (D / 4))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      float m = kNegInf;
#pragma unroll
      for (int s = 0; s < kOneTrip; ++s) m = fmaxf(m, ls[s]);
      float den = 0.0f;
      float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int s = 0; s < kOneTrip; ++s) {
        if (ls[s] == kNegInf) continue;
        const float w = expf(ls[s] - m);
        den += w;
        num.x += w * x[s].x;
        num.y += w * x[s].y;
        num.z += w * x[s].z;
        num.w += w * x[s].w;
      }
      float* o = a.out + static_cast<int64_t>(row) * a.out_ts + static_cast<int64_t>(h0 + h) * a.out_hs + c;
      o[0] = num.x / den * a.out_scale;
      o[1] = num.y / den * a.out_scale;
      o[2] = num.z / den * a.out_scale;
      o[3] = num.w / den * a.out_scale;
    }
    return;
  }
  for (int i = threadIdx.x; i < nh * num_splits; i += blockDim.x) {
    const int h = i / num_splits, s = i % num_splits;
    s_lse[h][s] = __ldcg(lse + (base + h) * num_splits + s);  // L2: written by other blocks
  }
  __syncthreads();
  if (threadIdx.x < nh) {
    const int h = threadIdx.x;
    float m = kNegInf;
    for (int s = 0; s < num_splits; ++s) m = fmaxf(m, s_lse[h][s]);
    float den = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const float x = s_lse[h][s];
      s_w[h][s] = x == kNegInf ? 0.0f : expf(x - m);
      if (x != kNegInf) den += s_w[h][s];
    }
    s_den[h] = den;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nh * D / 4; i += blockDim.x) {
    const int h = i / (D / 4), c = (i % (D / 4)) * 4;
    if (c >= a.v_head_dim) continue;
    const float4* p = reinterpret_cast<const float4*>(partial + (base + h) * num_splits * D + c);
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s0 = 0; s0 < num_splits; s0 += kBatch) {
      float4 x[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int s = s0 + j;
        x[j] = s < num_splits && s_lse[h][s] != kNegInf ? __ldcg(p + static_cast<int64_t>(s) * (D / 4))
                                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int s = s0 + j;
        if (s < num_splits && s_lse[h][s] != kNegInf) {
          const float w = s_w[h][s];
          num.x += w * x[j].x;
          num.y += w * x[j].y;
          num.z += w * x[j].z;
          num.w += w * x[j].w;
        }
      }
    }
    float* o = a.out + static_cast<int64_t>(row) * a.out_ts + static_cast<int64_t>(h0 + h) * a.out_hs + c;
    o[0] = num.x / s_den[h] * a.out_scale;
    o[1] = num.y / s_den[h] * a.out_scale;
    o[2] = num.z / s_den[h] * a.out_scale;
    o[3] = num.w / s_den[h] * a.out_scale;
  }
}

// counters: nullptr, or (num_splits > 1) the arrival counters of merge_splits_if_last.
template <int D, int HB, typename T, typename Cap, bool kPadded>
__global__ void __launch_bounds__(kVecThreads)
    decode_vec_kernel(DeviceArgs a, Cap cap, int num_splits, float* partial, float* lse, int* counters) {
  using S = VecShape<D, HB, T>;
  constexpr int G = S::kLanesPerKey, C = S::kCols, U = S::kUnroll;
  __shared__ float s_m[S::kSlots][HB], s_l[S::kSlots][HB];
  __shared__ __align__(16) float s_acc[S::kSlots][HB][D];
  const int split = blockIdx.x;
  const int group = a.num_qo_heads / a.num_kv_heads;
  const int head_blocks = group / HB;
  const int kv_head = blockIdx.y / head_blocks;
  const int h0 = kv_head * group + (blockIdx.y % head_blocks) * HB;
  const int r = blockIdx.z;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int slot = warp * S::kKeysPerWarp + lane / G;
  const int col = (lane % G) * C;
  const bool k_on = !kPadded || col < a.head_dim;    // this lane's q/k columns exist
  const bool v_on = !kPadded || col < a.v_head_dim;  // this lane's v/out columns exist
  const T* kc = static_cast<const T*>(a.k) + static_cast<int64_t>(kv_head) * a.k_hs + col;
  const T* vc = static_cast<const T*>(a.v) + static_cast<int64_t>(kv_head) * a.v_hs + col;

  // The K and V rows of key u of the step whose slots are `cur` (zeros past the split's end -- the
  // math below runs unconditionally: score masked, p = 0 -- and in the padding columns).
  auto load_key = [&](const int64_t(&cur)[U], int u, RawCols<T, C>(&kr)[U], RawCols<T, C>(&vr)[U]) {
    if (cur[u] >= 0 && k_on) {
      load_cols(kc + cur[u] * a.k_ts, kr[u]);
    } else {
      kr[u].clear();
    }
    if (cur[u] >= 0 && v_on) {
      load_cols(vc + cur[u] * a.v_ts, vr[u]);
    } else {
      vr[u].clear();
    }
  };

  // Before the PDL wait (see the top of the file): the lengths, the page table, the first step's
  // slots and its K/V rows of every key but the request's last; after it the last key's rows, then q.
  const int seq_len = a.seq_lens[r];
  int k_begin, k_end;
  split_range(seq_len, a.sliding_window, num_splits, split, k_begin, k_end);
  const int row = a.qo_indptr[r];
  const PageMap pages(a.kv_indices + a.kv_indptr[r], a.page_size);
  // Slot of each of this lane's keys of the step at `base` (-1: past the split's end).
  auto slots_of = [&](int base, int64_t(&sl)[U]) {
    int32_t index[U], offset[U];
#pragma unroll
    for (int u = 0; u < U; ++u) pages.locate(base + u * S::kSlots + slot, index[u], offset[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) {  // the page-id loads, all in flight together
      sl[u] = base + u * S::kSlots + slot < k_end
                  ? static_cast<int64_t>(pages.pages[index[u]]) * a.page_size + offset[u]
                  : -1;
    }
  };
  int64_t cur[U], next[U];
  RawCols<T, C> kr[U], vr[U];
  if (k_begin < k_end) {
    slots_of(k_begin, cur);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (k_begin + u * S::kSlots + slot < seq_len - 1) load_key(cur, u, kr, vr);
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  if (k_begin >= k_end) {  // uniform for the block, before any barrier
    if (tid < HB) lse[(static_cast<int64_t>(r) * a.num_qo_heads + h0 + tid) * num_splits + split] = kNegInf;
    if (counters != nullptr) merge_splits_if_last<D, HB>(a, num_splits, partial, lse, counters, r, h0);
    return;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (k_begin + u * S::kSlots + slot >= seq_len - 1) load_key(cur, u, kr, vr);
  }

  float q[HB][C];
  const float qs = q_prescale<Cap>(a.scale);
#pragma unroll
  for (int h = 0; h < HB; ++h) {
    const float* qr = a.q + static_cast<int64_t>(row) * a.q_ts + static_cast<int64_t>(h0 + h) * a.q_hs + col;
#pragma unroll
    for (int e = 0; e < C; ++e) q[h][e] = k_on ? qr[e] * qs : 0.0f;
  }
  float m[HB], l[HB], acc[HB][C];
#pragma unroll
  for (int h = 0; h < HB; ++h) {
    m[h] = kNegInf;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < C; ++e) acc[h][e] = 0.0f;
  }

  slots_of(k_begin + S::kStep, next);  // page ids one step ahead
  timeline_mark(0);
  for (int base = k_begin;;) {
    float s[U][HB];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[C];
      widen_cols(kr[u], kf);
#pragma unroll
      for (int h = 0; h < HB; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < C; ++e) dot += q[h][e] * kf[e];
        // Sum over the key group's G lanes (contiguous, G a power of two); every lane takes part.
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[u][h] = cur[u] >= 0 ? score_log2(cap, dot) : kNegInf;
      }
    }
    // Lazy rescaling: the running max rarely grows after the first keys, so the accumulators are
    // rescaled only when it grows for some lane of the warp (alpha is exactly 1 for the others).
    float mx[HB];
    bool grow = false;
#pragma unroll
    for (int h = 0; h < HB; ++h) {
      mx[h] = m[h];
#pragma unroll
      for (int u = 0; u < U; ++u) mx[h] = fmaxf(mx[h], s[u][h]);
      grow = grow || mx[h] > m[h];
    }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int h = 0; h < HB; ++h) {
        // m = -inf (no key of this slot seen yet): l and acc are 0 and stay so.
        const float alpha = mx[h] == m[h] ? 1.0f : fast_exp2(m[h] - mx[h]);
        m[h] = mx[h];
        l[h] *= alpha;
#pragma unroll
        for (int e = 0; e < C; ++e) acc[h][e] *= alpha;
      }
    }
    float p[U][HB];
#pragma unroll
    for (int h = 0; h < HB; ++h) {
      const float base_m = m[h] == kNegInf ? 0.0f : m[h];  // no key of this slot seen yet
#pragma unroll
      for (int u = 0; u < U; ++u) {
        p[u][h] = fast_exp2(s[u][h] - base_m);
        l[h] += p[u][h];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[C];
      widen_cols(vr[u], vf);
#pragma unroll
      for (int h = 0; h < HB; ++h) {
#pragma unroll
        for (int e = 0; e < C; ++e) acc[h][e] += p[u][h] * vf[e];
      }
    }
    base += S::kStep;
    if (base >= k_end) break;
#pragma unroll
    for (int u = 0; u < U; ++u) cur[u] = next[u];
#pragma unroll
    for (int u = 0; u < U; ++u) load_key(cur, u, kr, vr);
    slots_of(base + S::kStep, next);  // page ids one step ahead
  }

  timeline_mark(1);
  // Merge the slots. Slot 0 saw key k_begin, so the block max is finite.
#pragma unroll
  for (int h = 0; h < HB; ++h) {
    if (lane % G == 0) {
      s_m[slot][h] = m[h];
      s_l[slot][h] = l[h];
    }
    float4* dst = reinterpret_cast<float4*>(&s_acc[slot][h][col]);
#pragma unroll
    for (int e = 0; e < C / 4; ++e) dst[e] = make_float4(acc[h][4 * e], acc[h][4 * e + 1], acc[h][4 * e + 2], acc[h][4 * e + 3]);
  }
  __syncthreads();
  for (int i = tid; i < HB * D; i += kVecThreads) {
    const int h = i / D, c = i % D;
    if (kPadded && c >= a.v_head_dim) continue;  // (c == 0 always passes: lse is written)
    write_merged_states(a, s_m, s_l, s_acc, h, c, row, r, h0, split, num_splits, partial, lse);
  }
  timeline_mark(2);
  if (counters != nullptr) merge_splits_if_last<D, HB>(a, num_splits, partial, lse, counters, r, h0);
  timeline_mark(3);
}

// Grid (num_qo_heads, bs), D threads: out = sum_s exp(lse_s - M) * partial_s / sum_s exp(lse_s - M)
// over the splits' workspace rows (width D) of both decode kernels; columns past a.v_head_dim are
// not written.
template <int D>
__global__ void __launch_bounds__(D) merge_kernel(DeviceArgs a, int num_splits, const float* partial,
                                                  const float* lse) {
  pdl_wait();
  pdl_launch_dependents();
  const int h = blockIdx.x, r = blockIdx.y, c = threadIdx.x;
  if (c >= a.v_head_dim) return;
  const int64_t base = (static_cast<int64_t>(r) * a.num_qo_heads + h) * num_splits;
  float m = kNegInf;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, lse[base + s]);
  float num = 0.0f, den = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float x = lse[base + s];
    if (x == kNegInf) continue;
    const float w = expf(x - m);
    den += w;
    num += w * partial[(base + s) * D + c];
  }
  const int row = a.qo_indptr[r];
  a.out[static_cast<int64_t>(row) * a.out_ts + static_cast<int64_t>(h) * a.out_hs + c] = num / den * a.out_scale;
}

// Zeroed arrival counters for merge_splits_if_last on the current device (a buffer of 65,536
// ints, made on first use on the device's stream and never freed; the last block of each group
// sets its counter back to 0), or nullptr when `count` exceeds that or the first use falls inside
// a CUDA-graph capture (the CUDA-graph runner warms up eagerly first): merge_kernel then merges.
int* decode_merge_counters(int64_t count);

// The split count of a decode launch: requested_splits when > 0 (at most kMaxDecodeSplits), else
// fixed_decode_num_kv_splits(batch_size, max_seq_len).
inline int decode_split_count(int requested_splits, int64_t batch_size, int64_t max_seq_len) {
  return requested_splits > 0 ? std::min(requested_splits, kMaxDecodeSplits)
                              : fixed_decode_num_kv_splits(batch_size, max_seq_len);
}

// Launches `kernel` -- decode_vec_kernel or decode_mma_kernel (decode_mma_kernel.cuh), grid
// (num_splits, num_kv_heads * group / heads_per_block, bs), `threads` threads, `smem` bytes of
// dynamic shared memory (the tensor-core kernel's stages; the caller opts in above 48 KB) -- +
// merge_kernel when the keys are split and no counters are free. heads_per_block: HB, or fewer
// when the tensor-core kernel's instantiation for 8 heads runs a group of 3, 5, 6 or 7.
// requested_splits > 0 fixes the split count (at most kMaxDecodeSplits), else
// fixed_decode_num_kv_splits(bs, max_seq_len).
template <int D, int HB, typename Cap, typename Kernel>
void launch_split_decode(Kernel kernel, int threads, const DeviceArgs& a, Cap cap, int requested_splits,
                         int64_t max_seq_len, size_t smem = 0, int heads_per_block = HB) {
  const int head_blocks = a.num_qo_heads / a.num_kv_heads / heads_per_block;
  const int num_splits = decode_split_count(requested_splits, a.batch_size, max_seq_len);
  const int64_t rows = num_splits > 1 ? int64_t{a.batch_size} * a.num_qo_heads * num_splits : 0;
  const AsyncBuffer buf(static_cast<size_t>(rows * (D + 1)) * sizeof(float));
  float* partial = static_cast<float*>(buf.data());
  float* lse = partial + rows * D;
  const dim3 grid(num_splits, a.num_kv_heads * head_blocks, a.batch_size);
  int* counters = num_splits > 1 ? decode_merge_counters(int64_t{a.batch_size} * grid.y) : nullptr;
  launch_pdl(kernel, grid, dim3(threads), smem, current_stream(), a, cap, num_splits, partial, lse, counters);
  if (num_splits > 1 && counters == nullptr) {
    launch_pdl(merge_kernel<D>, dim3(a.num_qo_heads, a.batch_size), dim3(D), 0, current_stream(), a,
               num_splits, partial, lse);
  }
}

// Calls f(std::integral_constant<int, HB>{}, cap): HB heads per block, the largest of 8, 4, 2, 1
// that divides the group, and the call's score transform (SoftCap or NoSoftCap).
template <typename F>
void with_heads_and_cap(const DeviceArgs& a, F&& f) {
  const int group = a.num_qo_heads / a.num_kv_heads;
  auto heads = [&](auto cap) {
    if (group % 8 == 0) return f(std::integral_constant<int, 8>{}, cap);
    if (group % 4 == 0) return f(std::integral_constant<int, 4>{}, cap);
    if (group % 2 == 0) return f(std::integral_constant<int, 2>{}, cap);
    return f(std::integral_constant<int, 1>{}, cap);
  };
  if (a.soft_cap > 0.0f) return heads(SoftCap{a.soft_cap});
  return heads(NoSoftCap{0.0f});
}

template <int D, typename T, bool kPadded>
void launch_vec_cap(const DeviceArgs& a, int requested_splits, int64_t max_seq_len) {
  with_heads_and_cap(a, [&](auto hb, auto cap) {
    constexpr int HB = decltype(hb)::value;
    launch_split_decode<D, HB>(decode_vec_kernel<D, HB, T, decltype(cap), kPadded>, kVecThreads, a, cap,
                               requested_splits, max_seq_len);
  });
}

// The padded instantiations (paged_attention_decode_padded.cu, a translation unit of its own so
// that the two compile in parallel): width d = padded_head_dim(...) (64, 128 or 256), bf16/f16/FP8
// caches.
void launch_vec_padded(DType dtype, const DeviceArgs& a, int d, int requested_splits, int64_t max_seq_len);

}  // namespace rlm::cuda::attn
