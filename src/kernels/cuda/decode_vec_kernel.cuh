// The vectorised split-KV decode kernel (one query token per request), included by
// paged_attention_decode.cu. Grid (num_splits, num_kv_heads * head_blocks, bs), kVecThreads threads.
//
// A block scores one KV split of one request against HB qo heads of one kv head (GQA: the K/V rows
// of the group are read once). Each key row is read by a "key group" of D / 8 lanes, each lane
// holding 8 consecutive columns in one 16-byte load (two for f32 caches), so a warp reads 32 / (D /
// 8) keys per step and the block kVecWarps times that (kSlots key slots). A slot walks its keys kUnroll
// at a time, all 2 * kUnroll loads issued before the first use, the page ids of the next step
// fetched one step ahead, and keeps its own online softmax (max, sum, 8 output columns per head)
// in registers: no barrier in the main loop. At the end the slots are merged through shared
// memory; the block writes out directly when num_splits == 1, else the split's normalised partial
// output and its log-sum-exp (natural log) for merge_kernel.
//
// Keys of a request are divided evenly among the num_splits splits per request (on the device,
// from seq_lens), so a fixed num_splits serves any batch; a split without keys writes lse = -inf
// and returns at once (merge_kernel skips it). Scores are in log2 units (see score_log2).
#pragma once

#include "kernels/cuda/attention_common.cuh"

namespace rlm::cuda::attn {

constexpr int kVecThreads = 128;
constexpr int kVecWarps = kVecThreads / 32;
constexpr int kUnroll = 4;  // keys per slot per step

// 8 consecutive cache elements as raw bits (one 16-byte load; two for f32) and their widening.
template <typename T>
struct Raw8 {
  uint4 u;
};
template <>
struct Raw8<float> {
  float4 a, b;
};

__device__ __forceinline__ Raw8<__nv_bfloat16> load_raw8(const __nv_bfloat16* p) {
  return {__ldg(reinterpret_cast<const uint4*>(p))};
}
__device__ __forceinline__ Raw8<__half> load_raw8(const __half* p) { return {__ldg(reinterpret_cast<const uint4*>(p))}; }
__device__ __forceinline__ Raw8<float> load_raw8(const float* p) {
  const float4* v = reinterpret_cast<const float4*>(p);
  return {__ldg(v), __ldg(v + 1)};
}

__device__ __forceinline__ void widen2(uint32_t w, float& x0, float& x1, const __nv_bfloat16*) {
  __nv_bfloat162 h;
  memcpy(&h, &w, sizeof(h));
  const float2 f = __bfloat1622float2(h);
  x0 = f.x;
  x1 = f.y;
}
__device__ __forceinline__ void widen2(uint32_t w, float& x0, float& x1, const __half*) {
  __half2 h;
  memcpy(&h, &w, sizeof(h));
  const float2 f = __half22float2(h);
  x0 = f.x;
  x1 = f.y;
}
template <typename T>
__device__ __forceinline__ void widen8(const Raw8<T>& r, float (&x)[8]) {
  widen2(r.u.x, x[0], x[1], static_cast<const T*>(nullptr));
  widen2(r.u.y, x[2], x[3], static_cast<const T*>(nullptr));
  widen2(r.u.z, x[4], x[5], static_cast<const T*>(nullptr));
  widen2(r.u.w, x[6], x[7], static_cast<const T*>(nullptr));
}
template <>
__device__ __forceinline__ void widen8<float>(const Raw8<float>& r, float (&x)[8]) {
  x[0] = r.a.x, x[1] = r.a.y, x[2] = r.a.z, x[3] = r.a.w;
  x[4] = r.b.x, x[5] = r.b.y, x[6] = r.b.z, x[7] = r.b.w;
}

template <int D>
struct VecShape {
  static_assert(D % 64 == 0 && D <= 256, "head_dim must be 64, 128 or 256");
  static constexpr int kLanesPerKey = D / 8;  // 8, 16, 32
  static constexpr int kKeysPerWarp = 32 / kLanesPerKey;
  static constexpr int kSlots = kVecWarps * kKeysPerWarp;  // 16, 8, 4
  static constexpr int kStep = kSlots * kUnroll;           // keys per block step: 64, 32, 16
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

template <int D, int HB, typename T, typename Cap>
__global__ void __launch_bounds__(kVecThreads)
    decode_vec_kernel(DeviceArgs a, Cap cap, int num_splits, float* partial, float* lse) {
  using S = VecShape<D>;
  constexpr int G = S::kLanesPerKey;
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
  const int col = (lane % G) * 8;

  const int seq_len = a.seq_lens[r];
  int k_begin, k_end;
  split_range(seq_len, a.sliding_window, num_splits, split, k_begin, k_end);
  const int row = a.qo_indptr[r];
  if (k_begin >= k_end) {  // uniform for the block, before any barrier
    if (tid < HB) lse[(static_cast<int64_t>(r) * a.num_qo_heads + h0 + tid) * num_splits + split] = kNegInf;
    return;
  }
  const int32_t* pages = a.kv_indices + a.kv_indptr[r];
  const T* kc = static_cast<const T*>(a.k) + static_cast<int64_t>(kv_head) * a.k_hs + col;
  const T* vc = static_cast<const T*>(a.v) + static_cast<int64_t>(kv_head) * a.v_hs + col;

  float q[HB][8];
  const float qs = q_prescale<Cap>(a.scale);
#pragma unroll
  for (int h = 0; h < HB; ++h) {
    const float* qr = a.q + static_cast<int64_t>(row) * a.q_ts + static_cast<int64_t>(h0 + h) * a.q_hs + col;
#pragma unroll
    for (int e = 0; e < 8; ++e) q[h][e] = qr[e] * qs;
  }
  float m[HB], l[HB], acc[HB][8];
#pragma unroll
  for (int h = 0; h < HB; ++h) {
    m[h] = kNegInf;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[h][e] = 0.0f;
  }

  // Slot of each of this lane's keys of the step at `base` (-1: past the split's end).
  auto slots_of = [&](int base, int64_t (&sl)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = base + u * S::kSlots + slot;
      sl[u] = key < k_end ? slot_of(pages, a.page_size, key) : -1;
    }
  };
  int64_t next[kUnroll];
  slots_of(k_begin, next);
  for (int base = k_begin; base < k_end; base += S::kStep) {
    int64_t cur[kUnroll];
    Raw8<T> kr[kUnroll], vr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      cur[u] = next[u];
      if (cur[u] >= 0) {
        kr[u] = load_raw8(kc + cur[u] * a.k_ts);
        vr[u] = load_raw8(vc + cur[u] * a.v_ts);
      }
    }
    slots_of(base + S::kStep, next);  // page ids one step ahead

    float s[kUnroll][HB];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float kf[8];
      if (cur[u] >= 0) widen8(kr[u], kf);
#pragma unroll
      for (int h = 0; h < HB; ++h) {
        float dot = 0.0f;
        if (cur[u] >= 0) {
#pragma unroll
          for (int e = 0; e < 8; ++e) dot += q[h][e] * kf[e];
        }
        // Sum over the key group's G lanes (contiguous, G a power of two); every lane takes part.
#pragma unroll
        for (int o = G / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[u][h] = cur[u] >= 0 ? score_log2(cap, dot) : kNegInf;
      }
    }
    float p[kUnroll][HB];
#pragma unroll
    for (int h = 0; h < HB; ++h) {
      float mx = m[h];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[u][h]);
      const float base_m = mx == kNegInf ? 0.0f : mx;  // no key of this slot seen yet
      const float alpha = fast_exp2(m[h] - base_m);
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        p[u][h] = fast_exp2(s[u][h] - base_m);
        sum += p[u][h];
      }
      m[h] = mx;
      l[h] = l[h] * alpha + sum;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][e] *= alpha;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (cur[u] >= 0) {
        float vf[8];
        widen8(vr[u], vf);
#pragma unroll
        for (int h = 0; h < HB; ++h) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][e] += p[u][h] * vf[e];
        }
      }
    }
  }

  // Merge the slots. Slot 0 saw key k_begin, so the block max is finite.
#pragma unroll
  for (int h = 0; h < HB; ++h) {
    if (lane % G == 0) {
      s_m[slot][h] = m[h];
      s_l[slot][h] = l[h];
    }
    float4* dst = reinterpret_cast<float4*>(&s_acc[slot][h][col]);
    dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
    dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
  }
  __syncthreads();
  for (int i = tid; i < HB * D; i += kVecThreads) {
    const int h = i / D, c = i % D;
    float mx = kNegInf;
#pragma unroll
    for (int sl = 0; sl < S::kSlots; ++sl) mx = fmaxf(mx, s_m[sl][h]);
    float den = 0.0f, num = 0.0f;
#pragma unroll
    for (int sl = 0; sl < S::kSlots; ++sl) {
      const float w = fast_exp2(s_m[sl][h] - mx);  // 0 for a slot without keys (m = -inf)
      den += w * s_l[sl][h];
      num += w * s_acc[sl][h][c];
    }
    if (num_splits == 1) {
      a.out[static_cast<int64_t>(row) * a.out_ts + static_cast<int64_t>(h0 + h) * a.out_hs + c] = num / den;
    } else {
      const int64_t w = (static_cast<int64_t>(r) * a.num_qo_heads + h0 + h) * num_splits + split;
      partial[w * D + c] = num / den;
      if (c == 0) lse[w] = (mx + log2f(den)) * kLn2;
    }
  }
}

}  // namespace rlm::cuda::attn
