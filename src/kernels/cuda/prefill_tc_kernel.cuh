// The tensor-core flash-attention extend/prefill kernel over a paged KV cache (bf16, f16 or FP8
// e4m3 caches), included by paged_attention_prefill*.cu. Grid (ceil(max_qo_len / kRows), num_qo_heads, bs),
// 128 threads (4 warps), dynamic shared memory tc_smem_bytes<D, C>().
//
// A block takes kRows consecutive queries of one request and one qo head (the heaviest causal
// tiles first: blockIdx.x counts from the request's end). Its queries are read as f32, multiplied
// by q_prescale(scale) and rounded to the cache's 16-bit type into shared memory: this is the
// precision of the tensor-core path (q in bf16/f16, K and V exact, P = softmax numerators rounded
// to bf16/f16, all sums in f32). Visible keys are walked in tiles of kKeys rows gathered through
// the page table with 16-byte cp.async (zero-filled past the last visible key), two tiles in
// flight. Each warp owns 16 * kM query rows: S = Q K^T and O += P V by mma.sync m16n8k16 (ldmatrix,
// XOR-swizzled tiles), the online softmax in log2 units on the accumulator fragments (each row's
// max over its quad of lanes; O rescaled only when a max grew), P reused from the S registers as
// the A operand of P V. Masks (causal, sliding window, keys past the tile's end) are applied only
// on tiles that need them.
//
// kPadded: the instantiation's width D (64, 128 or 256) is above the call's head sizes (a.head_dim
// for q/k, a.v_head_dim for v/out; multiples of 16, so a 16-byte chunk of 8 columns is all inside
// or all outside): Q and K chunks past head_dim and V chunks past v_head_dim are zero-filled in
// shared memory, so S and O are those of the true sizes, and no output column past v_head_dim is
// written. Padded instantiations always take the kRanges code (a superset: null key ranges and lse
// behave as in the plain prefill), which halves their number.
//
// FP8 (e4m3) caches (C = __nv_fp8_e4m3, T = __half): a tile's raw bytes are gathered with 8-byte
// cp.async into a staging area, and each thread widens the chunks it copied to f16 (exact) into the
// 16-bit tile before the block's barrier; the next tile's copies go out right after, so they
// overlap this tile's products as the two-buffer pipeline of the 16-bit caches does. q and P are
// rounded to f16 (the f16 cache's precision); k_scale is in the score scale and v_scale applied
// to the output afterwards (scale_attention_output), as for the other FP8 kernels.
#pragma once

#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/mma_sm80.cuh"

namespace rlm::cuda::attn {

constexpr int kTcThreads = 128;

// Per head_dim 64 / 128 / 256 (chosen from ptxas reports, <= 255 registers; the instantiations now
// spill 0-56 bytes, most of them a few dozen, docs/design/attention_cuda.md): 32 / 32 /
// 16 query rows per warp (more rows per warp = fewer shared-memory fragment loads and fewer K/V
// tile loads per FLOP), 64 / 32 / 32 keys per tile (bounds the S registers), Q fragments kept in
// registers only for 64 (reloaded with ldmatrix per k-step otherwise).
template <int D>
struct TcShape {
  static constexpr int kWarps = kTcThreads / 32;
  static constexpr int kM = D == 256 ? 1 : 2;            // 16-row m-tiles per warp
  static constexpr int kRows = kWarps * 16 * kM;         // queries per block: 128, 128, 64
  static constexpr int kKeys = D == 64 ? 64 : 32;        // keys per tile
  static constexpr bool kQInRegs = D <= 64;              // Q fragments kept in registers
  static constexpr int kChunks = D / 8;                  // 16-byte chunks per row
  static constexpr size_t kSmemBytes = (size_t{kRows} * D + 4 * size_t{kKeys} * D) * 2;  // Q, 2 x (K, V)
  static_assert(kTcThreads % kChunks == 0 && kKeys % (kTcThreads / kChunks) == 0 && kKeys % 16 == 0, "tile shape");
};

// Dynamic shared memory of prefill_tc_kernel for cache element type C: FP8 caches add the staging
// area of one raw tile (K and V, one byte a value).
template <int D, typename C>
constexpr size_t tc_smem_bytes() {
  return TcShape<D>::kSmemBytes + (std::is_same_v<C, __nv_fp8_e4m3> ? 2 * size_t{TcShape<D>::kKeys} * D : 0);
}

// kWindow: sliding window on (a.sliding_window > 0), a compile-time variant like the soft-cap.
// kRanges: cascade attention's key ranges (a.kv_begin / a.kv_end) and lse output, a separate
// instantiation so the ordinary prefill's code (and registers) stay as they were.
// C: the cache's element type, T (or e4m3 with T = f16).
template <int D, typename T, bool kWindow, typename Cap, bool kRanges = false, bool kPadded = false,
          typename C = T>
__global__ void __launch_bounds__(kTcThreads) prefill_tc_kernel(DeviceArgs a, Cap cap) {
  using S = TcShape<D>;
  using M = Mma<T>;
  constexpr bool kFp8 = std::is_same_v<C, __nv_fp8_e4m3>;
  static_assert(std::is_same_v<C, T> || (kFp8 && std::is_same_v<T, __half>),
                "16-bit caches, or e4m3 widened to f16");
  constexpr int kM = S::kM, kKeys = S::kKeys;
  extern __shared__ __align__(16) unsigned char tc_smem[];
  T* s_q = reinterpret_cast<T*>(tc_smem);  // [kRows][D] swizzled
  T* s_k = s_q + S::kRows * D;             // [2][kKeys][D]
  T* s_v = s_k + 2 * kKeys * D;            // [2][kKeys][D]
  // FP8: one tile's raw K rows, then its V rows ([kKeys][D] bytes each, unswizzled).
  uint8_t* s_stage = reinterpret_cast<uint8_t*>(s_v + 2 * kKeys * D);

  const int r = blockIdx.z, h = blockIdx.y;
  const int qo_begin = a.qo_indptr[r];
  const int qo_len = a.qo_indptr[r + 1] - qo_begin;
  const int q0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * S::kRows;
  if (q0 >= qo_len) return;  // uniform for the block, before any barrier
  const int seq_len = a.seq_lens[r];
  const int pos0 = seq_len - qo_len + q0;   // position of the block's first query
  const int pos_last = pos0 + S::kRows - 1;  // of its last row (rows past qo_len are padding)
  const int window = kWindow ? a.sliding_window : 0;
  int k_lo = kWindow ? max(0, pos0 - window + 1) : 0;
  int k_hi = min(seq_len, pos_last + 1);  // keys [k_lo, k_hi) are visible to some row
  if constexpr (kRanges) {
    if (a.kv_begin != nullptr) k_lo = max(k_lo, a.kv_begin[r]);
    if (a.kv_end != nullptr) k_hi = min(k_hi, a.kv_end[r]);
    if (k_hi <= k_lo) {  // no key in range: zeros and lse = -inf, a uniform exit before any barrier
      for (int i = threadIdx.x; i < S::kRows * D; i += kTcThreads) {
        const int row = i / D;
        if (q0 + row >= qo_len || (kPadded && i % D >= a.v_head_dim)) continue;
        const int64_t t = qo_begin + q0 + row;
        a.out[t * a.out_ts + static_cast<int64_t>(h) * a.out_hs + i % D] = 0.0f;
        if (a.lse != nullptr && i % D == 0) a.lse[t * a.lse_ts + h] = kNegInf;
      }
      return;
    }
  }
  const int t_begin = k_lo / kKeys * kKeys;
  const int n_tiles = (k_hi - t_begin + kKeys - 1) / kKeys;  // >= 1
  const int kv_head = h / (a.num_qo_heads / a.num_kv_heads);
  const PageMap pages(a.kv_indices + a.kv_indptr[r], a.page_size);
  const C* kc = static_cast<const C*>(a.k) + static_cast<int64_t>(kv_head) * a.k_hs;
  const C* vc = static_cast<const C*>(a.v) + static_cast<int64_t>(kv_head) * a.v_hs;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, tq = lane % 4;
  const int wrow = warp * 16 * kM;  // the warp's first row in the block

  // Gathers key tile `tile` into buffer `buf` (FP8: into the staging area); rows past k_hi are
  // zero-filled (never NaN). Thread tid copies column chunk tid % kChunks of rows tid / kChunks +
  // k * kRowsPerPass: all its page lookups are issued before its copies.
  constexpr int kRowsPerPass = kTcThreads / S::kChunks;
  constexpr int kPasses = kKeys / kRowsPerPass;
  const int ld_col = (tid % S::kChunks) * 8, ld_row = tid / S::kChunks;
  const bool k_chunk = !kPadded || ld_col < a.head_dim;    // this thread's K chunk exists
  const bool v_chunk = !kPadded || ld_col < a.v_head_dim;  // and its V chunk
  auto load_tile = [&](int tile, int buf) {
    const int t0 = t_begin + tile * kKeys;
    T* dk = s_k + buf * kKeys * D;
    T* dv = s_v + buf * kKeys * D;
    int32_t index[kPasses], offset[kPasses];
    int64_t slot[kPasses];
#pragma unroll
    for (int k = 0; k < kPasses; ++k) pages.locate(t0 + ld_row + k * kRowsPerPass, index[k], offset[k]);
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {  // the page-id loads, all in flight together
      slot[k] = t0 + ld_row + k * kRowsPerPass < k_hi
                    ? static_cast<int64_t>(pages.pages[index[k]]) * a.page_size + offset[k]
                    : -1;
    }
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int j = ld_row + k * kRowsPerPass;
      const bool ok_k = slot[k] >= 0 && k_chunk, ok_v = slot[k] >= 0 && v_chunk;
      if constexpr (kFp8) {
        cp_async8(s_stage + j * D + ld_col, ok_k ? kc + slot[k] * a.k_ts + ld_col : kc, ok_k ? 8 : 0);
        cp_async8(s_stage + (kKeys + j) * D + ld_col, ok_v ? vc + slot[k] * a.v_ts + ld_col : vc,
                  ok_v ? 8 : 0);
      } else {
        cp_async16(dk + swizzle<D>(j, ld_col), ok_k ? kc + slot[k] * a.k_ts + ld_col : kc, ok_k ? 16 : 0);
        cp_async16(dv + swizzle<D>(j, ld_col), ok_v ? vc + slot[k] * a.v_ts + ld_col : vc, ok_v ? 16 : 0);
      }
    }
  };
  // FP8: the staged chunks this thread copied (complete once its copies are waited for), widened
  // to f16 into buffer `buf`.
  auto widen_tile = [&](int buf) {
    T* dk = s_k + buf * kKeys * D;
    T* dv = s_v + buf * kKeys * D;
#pragma unroll 1
    for (int k = 0; k < kPasses; ++k) {  // one row at a time: the O accumulators hold the registers
      const int j = ld_row + k * kRowsPerPass;
      const uint2 kb = *reinterpret_cast<const uint2*>(s_stage + j * D + ld_col);
      const uint2 vb = *reinterpret_cast<const uint2*>(s_stage + (kKeys + j) * D + ld_col);
      *reinterpret_cast<uint4*>(dk + swizzle<D>(j, ld_col)) = e4m3x8_to_f16x8(kb);
      *reinterpret_cast<uint4*>(dv + swizzle<D>(j, ld_col)) = e4m3x8_to_f16x8(vb);
    }
  };
  load_tile(0, 0);
  cp_async_commit();

  // Q -> shared (scaled, rounded to T); padding rows are zero.
  const float qs = q_prescale<Cap>(a.scale);
  for (int i = tid; i < S::kRows * S::kChunks; i += kTcThreads) {
    const int row = i / S::kChunks, col = (i % S::kChunks) * 8;
    uint4 packed = make_uint4(0, 0, 0, 0);
    if (q0 + row < qo_len && (!kPadded || col < a.head_dim)) {
      const float* src =
          a.q + static_cast<int64_t>(qo_begin + q0 + row) * a.q_ts + static_cast<int64_t>(h) * a.q_hs + col;
      packed.x = M::pack(src[0] * qs, src[1] * qs);
      packed.y = M::pack(src[2] * qs, src[3] * qs);
      packed.z = M::pack(src[4] * qs, src[5] * qs);
      packed.w = M::pack(src[6] * qs, src[7] * qs);
    }
    *reinterpret_cast<uint4*>(s_q + swizzle<D>(row, col)) = packed;
  }

  float o[kM][D / 8][4];
  float m_run[kM][2], l_run[kM][2];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mi][n][e] = 0.0f;
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      m_run[mi][hr] = kNegInf;
      l_run[mi][hr] = 0.0f;
    }
  }
  constexpr int kQFrags = S::kQInRegs ? D / 16 : 1;
  uint32_t qf[kM][kQFrags][4];

  for (int it = 0; it < n_tiles; ++it) {
    const int buf = it & 1;
    if constexpr (kFp8) {
      // Buffer `buf` was last read in pass it - 2 (the barrier at the end of pass it - 1 is past).
      cp_async_wait<0>();
      widen_tile(buf);
      if (it + 1 < n_tiles) {  // the staging area is free again: the next tile's copies go out
        load_tile(it + 1, buf ^ 1);
        cp_async_commit();
      }
    } else if (it + 1 < n_tiles) {
      load_tile(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile `it` (and on the first pass s_q) visible to every warp
    if constexpr (S::kQInRegs) {
      if (it == 0) {
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) {
            ldmatrix_x4(qf[mi][kk], s_q + swizzle<D>(wrow + mi * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
          }
        }
      }
    }
    const T* bk = s_k + buf * kKeys * D;
    const T* bv = s_v + buf * kKeys * D;

    // S = Q K^T
    float s[kM][kKeys / 8][4];
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][n][e] = 0.0f;
      }
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t af[kM][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        if constexpr (S::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) af[mi][e] = qf[mi][kk][e];
        } else {
          ldmatrix_x4(af[mi], s_q + swizzle<D>(wrow + mi * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));
        }
      }
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, bk + swizzle<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 16 + ((lane >> 3) & 1) * 8));
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          M::mma(s[mi][2 * np], af[mi], b[0], b[1]);
          M::mma(s[mi][2 * np + 1], af[mi], b[2], b[3]);
        }
      }
    }

    // Scores in log2 units, masked where needed.
    const int t0 = t_begin + it * kKeys;
    const bool need_mask = t0 + kKeys - 1 > pos0 || (kWindow && t0 <= pos_last - window) ||
                           (kRanges && (t0 + kKeys > k_hi || t0 < k_lo));
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = score_log2(cap, s[mi][n][e]);
          if (need_mask) {
            const int pos = pos0 + wrow + mi * 16 + g + (e >= 2 ? 8 : 0);
            const int key = t0 + n * 8 + 2 * tq + (e & 1);
            const bool visible =
                key <= pos && key < k_hi && (!kRanges || key >= k_lo) && (!kWindow || key > pos - window);
            if (!visible) x = kNegInf;
          }
          s[mi][n][e] = x;
        }
      }
    }

    // Online softmax: row g uses elements 0, 1 and row g + 8 elements 2, 3 of each n-tile; a row
    // is spread over the 4 lanes of a quad. Lazy rescaling: O and l are rescaled only when some
    // row max of the warp grew (alpha is exactly 1 for the rows whose max did not).
    float mx[kM][2];
    bool grow = false;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        float x = m_run[mi][hr];
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) x = fmaxf(x, fmaxf(s[mi][n][2 * hr], s[mi][n][2 * hr + 1]));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
        mx[mi][hr] = x;
        grow = grow || x > m_run[mi][hr];
      }
    }
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          // m_run = -inf (nothing visible to this row yet): l and O are 0 and stay so.
          const float alpha = mx[mi][hr] == m_run[mi][hr] ? 1.0f : fast_exp2(m_run[mi][hr] - mx[mi][hr]);
          m_run[mi][hr] = mx[mi][hr];
          l_run[mi][hr] *= alpha;
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o[mi][n][2 * hr] *= alpha;
            o[mi][n][2 * hr + 1] *= alpha;
          }
        }
      }
    }
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float base = m_run[mi][hr] == kNegInf ? 0.0f : m_run[mi][hr];  // nothing visible yet
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
          const float p0 = fast_exp2(s[mi][n][2 * hr] - base), p1 = fast_exp2(s[mi][n][2 * hr + 1] - base);
          s[mi][n][2 * hr] = p0;
          s[mi][n][2 * hr + 1] = p1;
          sum += p0 + p1;
        }
        l_run[mi][hr] += sum;  // this lane's part of the row sum
      }
    }

    // O += P V
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t pa[kM][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        pa[mi][0] = M::pack(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        pa[mi][1] = M::pack(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        pa[mi][2] = M::pack(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        pa[mi][3] = M::pack(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, bv + swizzle<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 16 + (lane >> 4) * 8));
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          M::mma(o[mi][2 * dp], pa[mi], b[0], b[1]);
          M::mma(o[mi][2 * dp + 1], pa[mi], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer `buf` before it is refilled
  }

#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = l_run[mi][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = wrow + mi * 16 + g + 8 * hr;
      if (q0 + row < qo_len) {
        float inv = 1.0f / l;
        if constexpr (kRanges) {
          if (l == 0.0f) inv = 0.0f;  // no visible key in the ranges: zeros
          if (a.lse != nullptr && tq == 0) {
            // m_run and the exponents are in log2 units.
            a.lse[static_cast<int64_t>(qo_begin + q0 + row) * a.lse_ts + h] =
                l > 0.0f ? (m_run[mi][hr] + log2f(l)) * 0.69314718055994531f : kNegInf;
          }
        }
        float* dst = a.out + static_cast<int64_t>(qo_begin + q0 + row) * a.out_ts +
                     static_cast<int64_t>(h) * a.out_hs + 2 * tq;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          if (kPadded && n * 8 >= a.v_head_dim) break;
          dst[n * 8] = o[mi][n][2 * hr] * inv;
          dst[n * 8 + 1] = o[mi][n][2 * hr + 1] * inv;
        }
      }
    }
  }
}

template <int D, typename T, bool kWindow, bool kPadded, typename Cap, typename C = T>
void launch_tc(const DeviceArgs& a, Cap cap, int64_t max_qo_len) {
  auto* kernel = prefill_tc_kernel<D, T, kWindow, Cap, true, kPadded, C>;
  if constexpr (!kPadded) {
    if (a.kv_begin == nullptr && a.kv_end == nullptr && a.lse == nullptr) {
      kernel = prefill_tc_kernel<D, T, kWindow, Cap, false, false, C>;
    }
  }
  constexpr size_t smem = tc_smem_bytes<D, C>();
  RLM_CUDA_ATTN_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((max_qo_len + TcShape<D>::kRows - 1) / TcShape<D>::kRows), a.num_qo_heads,
                  a.batch_size);
  kernel<<<grid, kTcThreads, smem, current_stream()>>>(a, cap);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
}

template <int D, typename T, bool kPadded, typename C = T>
void launch_tc_variant(const DeviceArgs& a, int64_t max_qo_len) {
  const bool window = a.sliding_window > 0;
  if (a.soft_cap > 0.0f) {
    if (window) return launch_tc<D, T, true, kPadded, SoftCap, C>(a, SoftCap{a.soft_cap}, max_qo_len);
    return launch_tc<D, T, false, kPadded, SoftCap, C>(a, SoftCap{a.soft_cap}, max_qo_len);
  }
  if (window) return launch_tc<D, T, true, kPadded, NoSoftCap, C>(a, NoSoftCap{0.0f}, max_qo_len);
  return launch_tc<D, T, false, kPadded, NoSoftCap, C>(a, NoSoftCap{0.0f}, max_qo_len);
}

template <int D, bool kPadded>
void launch_tc_dtype(DType dtype, const DeviceArgs& a, int64_t max_qo_len) {
  if (dtype == DType::kBF16) return launch_tc_variant<D, __nv_bfloat16, kPadded>(a, max_qo_len);
  return launch_tc_variant<D, __half, kPadded>(a, max_qo_len);
}

// The padded instantiations (paged_attention_prefill_padded.cu, a translation unit of its own so
// that the two compile in parallel): width d = padded_head_dim(...) (64, 128 or 256), bf16/f16.
void launch_tc_padded(DType dtype, const DeviceArgs& a, int d, int64_t max_qo_len);

// FP8 (e4m3) caches, tuned (d = head_dim = v_head_dim, 64 / 128 / 256) or padded (d =
// padded_head_dim(...)) instantiations (paged_attention_prefill_fp8.cu, a translation unit of its own).
void launch_tc_fp8(const DeviceArgs& a, int d, bool padded, int64_t max_qo_len);

}  // namespace rlm::cuda::attn
