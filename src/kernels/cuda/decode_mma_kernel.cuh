// The tensor-core split-KV decode kernel, head_dim 64 or 128 (q/k and v alike), included by
// paged_attention_decode.cu: FP8 (e4m3) caches always, bf16 / f16 caches whose blocks hold 5 to 8
// q heads of a kv head (decode_mma_heads below; the dispatcher's decode_mma16). Same grid, splits,
// workspace and merge as decode_vec_kernel (decode_vec_kernel.cuh); only the arithmetic inside a
// split differs.
//
// Why: the vectorised kernel widens every cached value to f32 and does HB FMAs per value for q.k
// and HB more for p.v. At FP8's byte rate those conversions and FMAs, not memory, bound it (about
// half the copy bandwidth at batch 256 on an H100); with 8 heads a block they bound it for bf16
// too (0.48 of copy on an H200), and a group it cannot divide into 8, 4 or 2 heads (3, 5, 6, 7)
// runs as blocks of fewer heads that each read the whole cache. Here the products run on the
// tensor cores (mma.sync m16n8k16, f32 accumulate) with up to 8 heads as the MMA's n: a cached
// FP8 byte costs half a conversion (e4m3x2 -> f16x2 is exact) and no FMA, a bf16 / f16 value goes
// into its own MMA as it is, and a block takes every head of a group up to 8.
//
// Layout (a warp takes 16 keys at a time; the block's NW warps take 16 NW consecutive keys per step):
// - S^T = K Q^T: A = K (16 keys x 16 columns per MMA, rows g and g + 8 of lane (g, t) = keys g,
//   g + 8 of the chunk), B = Q^T (16 columns x 8 heads, head g; heads past nh are zero). The sum
//   over the head's columns may take them in any order, so lane t of a key's group of 4 holds the
//   key's 16-byte pieces t, t + 4, ... (each load instruction reads whole 64-byte halves of 8
//   rows) and the same permutation is applied to q.
// - O^T += V^T P^T: A = V^T (16 value columns x 16 keys), B = P^T (16 keys x 8 heads). A's pairs
//   (keys 2t, 2t + 1 of one column) are two keys' values interleaved by one byte permute; the
//   output columns are permuted so that lane g holds D/8 consecutive values of each of its 4 keys.
//   P^T's fragment is S^T's accumulator transposed in registers (movmatrix).
// - Precision: e4m3 values are exact in f16, bf16 / f16 values are their own MMA type. q and p are
//   split into hi + lo parts of that type (two MMAs each), so the products keep ~16-22 bits of q
//   and p: the results match the f32 CPU twin to the same tolerance as decode_vec_kernel's
//   (summation order aside).
// - Heads: HB (1, 2, 4 or 8) is the instantiation's, nh the block's (decode_mma_heads: HB, or at
//   HB = 8 the largest divisor of the group up to 8); heads past nh are zero in q and not written.
//   Only FP8 caches at head_dim 64 take HB = 1, 2, 4 (launch_mma_cap).
// - Online softmax per head in registers (log2 domain, lazy rescaling as in decode_vec_kernel),
//   the row sums kept per lane and reduced at the end; the warps' states meet in shared memory.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "core/env.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/decode_vec_kernel.cuh"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda::attn {

constexpr int kMmaDecodeKeys = 16;  // keys per warp per step

// The 8x8 16-bit matrix held as one register per lane (row g, columns 2t, 2t + 1), transposed.
__device__ __forceinline__ uint32_t transpose_8x8_b16(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// x = hi + lo with hi = f16(x) and lo = f16(x - hi), two f16x2 registers for (x0, x1).
__device__ __forceinline__ void split_f16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const float h0 = __half2float(__float2half_rn(x0)), h1 = __half2float(__float2half_rn(x1));
  hi = Mma<__half>::pack(h0, h1);  // exact: h0, h1 are f16 values
  lo = Mma<__half>::pack(x0 - h0, x1 - h1);
}

// One warp's 16 keys as raw bytes: K rows of keys g and g + 8 (16-byte pieces t, t + 4, ... each),
// V rows of keys 2t, 2t + 1, 2t + 8, 2t + 9 (D/8 bytes at column (D/8) g each); zeros for keys
// past the split's end.
// T: the cache type -- e4m3 (converted to f16 for the MMAs), bf16 or f16 (their own MMAs): a lane's
// K bytes per row and V bytes per key scale with its size.
template <int D, typename T = __nv_fp8_e4m3>
struct MmaChunk {
  static constexpr int kKBytes = D * static_cast<int>(sizeof(T)) / 4,
                       kVBytes = D * static_cast<int>(sizeof(T)) / 8;
  uint32_t k[2][kKBytes / 4];
  uint32_t v[4][kVBytes / 4];
};

// A 16-byte piece as a chunk's four consecutive words w[0..3].
__device__ __forceinline__ void put_words(uint32_t* w, uint4 x) {
  w[0] = x.x;
  w[1] = x.y;
  w[2] = x.z;
  w[3] = x.w;
}

// The chunks travel through shared memory (cp.async, sm_80+): each lane copies its own 16-byte
// (8-byte for an FP8 V row at head_dim 64) pieces of a chunk and later reads back exactly those,
// so its own cp.async.wait_group is the only synchronisation needed; a piece of a key past the
// split's end is zero-filled (nothing read).
// Chunks in shared memory per warp: while a warp computes one chunk, the next two are loading
// (4 stages measured no faster on an H100: docs/perf/decode_kernels.md, ninth section).
constexpr int kMmaDecodeStages = 3;
// Bytes of one warp's stage: MmaChunk's words for each of the 32 lanes.
template <int D, typename T = __nv_fp8_e4m3>
constexpr int mma_stage_bytes() {
  return 32 * static_cast<int>(sizeof(MmaChunk<D, T>));
}
// Stages a warp: FP8 caches kMmaDecodeStages; 16-bit caches load their chunks into registers and
// keep one stage's bytes, which only the warps' partial outputs use.
template <typename T>
constexpr int mma_decode_stages() {
  return sizeof(T) == 2 ? 1 : kMmaDecodeStages;
}
// Dynamic shared memory of decode_mma_kernel with NW warps: the stages, which the warps'
// partial outputs ([NW][HB][D] floats, HB <= 8) reuse after the last chunk.
template <int D, int NW, typename T = __nv_fp8_e4m3>
constexpr int mma_decode_smem_bytes() {
  static_assert(mma_decode_stages<T>() * mma_stage_bytes<D, T>() >= 8 * D * 4,
                "the partial outputs fit the stages");
  return mma_decode_stages<T>() * NW * mma_stage_bytes<D, T>();
}

// FP8 caches: blocks of 4 warps, at least 3 per multiprocessor (126 registers a thread at head_dim 128, 144
// with a soft cap; Nsight Compute counts ~3 resident), or blocks of 8 warps, 2 per multiprocessor (at most
// 128 registers): the same keys of one (request, head block, split) over twice the warps; mma_decode_warps
// below picks one per launch. 16-bit caches (chunks loaded into two register buffers): 2 blocks of 4 warps
// (248-254 registers at head_dim 128, 146-164 at 64).
template <int NW, typename T = __nv_fp8_e4m3>
constexpr int mma_decode_min_blocks() {
  static_assert(NW == 4 || NW == 8, "4 or 8 warps a block");
  if constexpr (sizeof(T) == 2) return NW == 4 ? 2 : 1;  // two 8 KB chunks a lane's registers
  return NW == 4 ? 3 : 2;
}

// The MMA input type for a cache type: e4m3 values are exact in f16; bf16 / f16 caches are used as
// they are.
template <typename T>
using MmaIn = std::conditional_t<sizeof(T) == 1, __half, T>;

// x = hi + lo in the MMA's 16-bit type, two registers for (x0, x1): f16 (split_f16x2) or bf16.
template <typename M>
__device__ __forceinline__ void split_x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  if constexpr (std::is_same_v<M, __half>) {
    split_f16x2(x0, x1, hi, lo);
  } else {
    const float h0 = __bfloat162float(__float2bfloat16_rn(x0)),
                h1 = __bfloat162float(__float2bfloat16_rn(x1));
    hi = Mma<__nv_bfloat16>::pack(h0, h1);  // exact: h0, h1 are bf16 values
    lo = Mma<__nv_bfloat16>::pack(x0 - h0, x1 - h1);
  }
}

// Heads a block of the tensor-core kernel takes of a group of `group` q heads a kv head: the
// largest divisor of the group up to 8 (the MMA's n), so that a group of 3, 5, 6 or 7 is one block
// and a group of 12 two blocks of 6.
__host__ __device__ constexpr int decode_mma_heads(int group) {
  int h = group < 8 ? group : 8;
  while (group % h != 0) --h;
  return h;
}
// The instantiation (HB) that runs nh heads a block for FP8 caches at head_dim 64: nh itself when
// 1, 2 or 4, else 8.
constexpr int decode_mma_instance(int nh) { return nh == 1 || nh == 2 || nh == 4 ? nh : 8; }

// FP8 caches: a warp has the next two chunks loading (cp.async into its shared-memory stages) while
// it computes on one; a chunk is read into registers only when its turn comes. Held in registers
// instead (the previous kernel), the chunks in flight cost ~64 registers and spills, and a register
// copy between buffers waited for the loads: at most one chunk was really in flight
// (docs/perf/decode_kernels.md, ninth section: FP8-KV attention 0.726 -> 0.786 of copy bandwidth at
// batch 256 on an H100).
// 16-bit caches (kDirect): the chunks are loaded straight into two register buffers in turn (the
// next chunk's loads issued before the current one is computed; no copy between buffers), 64
// registers each at head_dim 128: the cp.async stages read only 0.57-0.61 of copy on an H200 at
// batch 32-256 where this reads 0.81-0.90 (docs/perf/decode_kernels.md, twenty-fourth section); FP8
// caches read this way measured slower (0.44-0.57 against 0.58-0.71).
// q's MMA fragments sit in shared memory (read once per k-step). NW warps a block
// (mma_decode_min_blocks).
template <int D, int HB, typename Cap, int NW, typename T = __nv_fp8_e4m3>
__global__ void __launch_bounds__(NW * 32, (mma_decode_min_blocks<NW, T>()))
    decode_mma_kernel(DeviceArgs a, Cap cap, int num_splits, float* partial, float* lse, int* counters) {
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  using M = MmaIn<T>;
  constexpr int kElem = static_cast<int>(sizeof(T));
  constexpr bool kDirect = kElem == 2;  // chunks into registers, not through shared memory
  constexpr int VP = 16 / kElem;  // values per 16-byte piece
  static_assert(HB >= 1 && HB <= 8, "at most 8 heads per block (the MMA's n)");
  constexpr int KS = D / 16;  // k-steps of S^T (16 columns each)
  constexpr int MT = D / 16;  // m-tiles of O^T (16 value columns each)
  using Chunk = MmaChunk<D, T>;
  __shared__ float s_m[NW][HB], s_l[NW][HB];
  // Lane's words {q hi (b0, b1), q lo (b0, b1)} of k-step s (the same in every warp).
  __shared__ uint4 s_q[KS][32];
  const int split = blockIdx.x;
  const int group = a.num_qo_heads / a.num_kv_heads;
  const int nh = HB == 8 ? decode_mma_heads(group) : HB;  // this block's heads (see the top)
  const int head_blocks = group / nh;
  const int kv_head = blockIdx.y / head_blocks;
  const int h0 = kv_head * group + (blockIdx.y % head_blocks) * nh;
  const int r = blockIdx.z;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;

  // The lengths and the page table are written before the layers run, never by the kernel this
  // one waits on (the KV store), so they and the first three chunks' cache slots are read while
  // that kernel finishes (PDL); after the wait the first stages' copies are issued before q's.
  const int seq_len = a.seq_lens[r];
  int k_begin, k_end;
  split_range(seq_len, a.sliding_window, num_splits, split, k_begin, k_end);
  const int row = a.qo_indptr[r];
  const PageMap pages(a.kv_indices + a.kv_indptr[r], a.page_size);
  const auto* kc = static_cast<const uint8_t*>(a.k) + static_cast<int64_t>(kv_head) * a.k_hs * kElem + 16 * t;
  const auto* vc =
      static_cast<const uint8_t*>(a.v) + static_cast<int64_t>(kv_head) * a.v_hs * kElem + Chunk::kVBytes * g;
  // The cache slot of key `pos` (-1 past the split's end); lanes 0-15 look up the chunk's keys.
  auto chunk_slot = [&](int chunk) -> int64_t {
    const int pos = chunk + lane % kMmaDecodeKeys;
    return pos < k_end ? pages.slot(pos) : -1;
  };
  // The same in two halves, for the stages' loop (after the empty-split return): lookup() issues
  // the page-table load with no branch around it (a key past the split's end reads key k_end - 1's
  // entry and gets offset -1), slot_of() is the first use of what it loaded.
  struct PageEntry {
    uint32_t page;
    int32_t offset;  // -1: past the split's end
  };
  auto lookup = [&](int chunk) -> PageEntry {
    const int pos = chunk + lane % kMmaDecodeKeys;
    int32_t index, offset;
    pages.locate(pos < k_end ? pos : k_end - 1, index, offset);
    return {static_cast<uint32_t>(pages.pages[index]), pos < k_end ? offset : -1};
  };
  auto slot_of = [&](PageEntry e) -> int64_t {
    return e.offset >= 0
               ? static_cast<int64_t>(uint64_t{e.page} * static_cast<uint32_t>(a.page_size)) + e.offset
               : -1;
  };
  constexpr int kStep = NW * kMmaDecodeKeys;
  int chunk = k_begin + warp * kMmaDecodeKeys;
  int64_t first_slots[kMmaDecodeStages];  // the first kMmaDecodeStages chunks'
#pragma unroll
  for (int st = 0; st < kMmaDecodeStages; ++st) {
    first_slots[st] = chunk + st * kStep < k_end ? chunk_slot(chunk + st * kStep) : -1;
  }
  pdl_wait();
  pdl_launch_dependents();

  if (k_begin >= k_end) {  // uniform for the block, before any barrier
    if (tid < nh) lse[(static_cast<int64_t>(r) * a.num_qo_heads + h0 + tid) * num_splits + split] = kNegInf;
    if (counters != nullptr) merge_splits_if_last<D, HB>(a, num_splits, partial, lse, counters, r, h0, nh);
    return;
  }
  // This warp's stages in dynamic shared memory. A lane's words lie 16 (8) bytes at a time in
  // piece-major order across the 32 lanes, so a piece's 32 copies and reads are consecutive.
  extern __shared__ __align__(16) unsigned char s_kv[];
  auto stage = [&](int st) { return s_kv + (st * NW + warp) * mma_stage_bytes<D, T>(); };
  // V key j of this lane's four (2t, 2t + 1, 2t + 8, 2t + 9) of the chunk whose page slots are
  // my_slot: its slot vs (-1 past the split's end) and the lane's bytes of its row (row 0 for -1).
  auto v_row = [&](int64_t my_slot, int j, int64_t& vs) {
    vs = __shfl_sync(0xffffffffu, my_slot, 2 * t + (j & 1) + (j & 2) * 4);
    return vc + (vs >= 0 ? vs : 0) * a.v_ts * kElem;
  };
  // The chunk of the page slots my_slot (lanes 0-15: the chunk's keys) into stage st: lane (g, t)
  // copies what MmaChunk says it holds -- K rows of keys g and g + 8 (16-byte pieces t, t + 4, ...),
  // V rows of keys 2t, 2t + 1, 2t + 8, 2t + 9 (D/8 bytes at column (D/8) g); zeros for keys past
  // the split's end. One commit group per call (empty when !on). Every copy carries the .L2::128B
  // hint: one instruction covers 64 bytes of each of 8 K rows, and without it DRAM served those
  // halves apart (H100, 2,048 keys, batch 32 / 128 / 256: 0.69 / 0.73 / 0.78 of copy bandwidth ->
  // 0.70 / 0.76 / 0.82; head_dim 64: 0.66 / 0.69 / 0.68 -> 0.67 / 0.83 / 0.86; decode_kernels.md).
  // And every copy goes through L1 (cp_async16_l1, .ca): with .cg the L2 saw about one request a
  // sector and its tag lookups bounded the kernel (88% busy, DRAM 62%); H200, group 4, batch 32 /
  // 128 / 256: 0.61 / 0.69 / 0.72 of copy -> 0.62-0.63 / 0.76 / 0.79 (twenty-sixth section).
  auto copy_chunk = [&](int64_t my_slot, int st, bool on) {
    const int64_t ks0 = __shfl_sync(0xffffffffu, my_slot, g), ks1 = __shfl_sync(0xffffffffu, my_slot, g + 8);
    unsigned char* base = stage(st);
    int off = 0;  // bytes into the stage: piece p of width B sits at off + B * lane
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      const int64_t ks = row == 0 ? ks0 : ks1;
#pragma unroll
      for (int i = 0; i < Chunk::kKBytes / 16; ++i, off += 16 * 32) {
        cp_async16_l1(base + off + 16 * lane, kc + (ks >= 0 ? ks : 0) * a.k_ts * kElem + 64 * i,
                      on && ks >= 0 ? 16 : 0);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int64_t vs;
      const uint8_t* src = v_row(my_slot, j, vs);
      if constexpr (Chunk::kVBytes % 16 == 0) {
        const int bytes = on && vs >= 0 ? 16 : 0;
#pragma unroll
        for (int pc = 0; pc < Chunk::kVBytes / 16; ++pc, off += 16 * 32) {
          cp_async16_l1(base + off + 16 * lane, src + 16 * pc, bytes);
        }
      } else {
        cp_async8<true>(base + off + 8 * lane, src, on && vs >= 0 ? Chunk::kVBytes : 0);
        off += Chunk::kVBytes * 32;
      }
    }
    cp_async_commit();
  };
  // Stage st into registers (its group complete).
  auto read_chunk = [&](int st, Chunk& c) {
    const unsigned char* base = stage(st);
    int off = 0;
#pragma unroll
    for (int row = 0; row < 2; ++row) {
#pragma unroll
      for (int i = 0; i < Chunk::kKBytes / 16; ++i, off += 16 * 32) {
        const uint4 x = *reinterpret_cast<const uint4*>(base + off + 16 * lane);
        put_words(&c.k[row][4 * i], x);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (Chunk::kVBytes % 16 == 0) {
#pragma unroll
        for (int pc = 0; pc < Chunk::kVBytes / 16; ++pc, off += 16 * 32) {
          const uint4 x = *reinterpret_cast<const uint4*>(base + off + 16 * lane);
          put_words(&c.v[j][4 * pc], x);
        }
      } else {
        const uint2 x = *reinterpret_cast<const uint2*>(base + off + 8 * lane);
        c.v[j][0] = x.x;
        c.v[j][1] = x.y;
        off += Chunk::kVBytes * 32;
      }
    }
  };
  // kDirect: the chunk of the page slots my_slot (lanes 0-15: the chunk's keys) straight into c --
  // the same words a lane's copy_chunk / read_chunk give it; zeros for keys past the split's end.
  auto load_chunk = [&](int64_t my_slot, Chunk& c) {
    const int64_t ks0 = __shfl_sync(0xffffffffu, my_slot, g), ks1 = __shfl_sync(0xffffffffu, my_slot, g + 8);
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      const int64_t ks = row == 0 ? ks0 : ks1;
#pragma unroll
      for (int i = 0; i < Chunk::kKBytes / 16; ++i) {
        uint4 x = make_uint4(0, 0, 0, 0);
        if (ks >= 0) x = __ldg(reinterpret_cast<const uint4*>(kc + ks * a.k_ts * kElem + 64 * i));
        put_words(&c.k[row][4 * i], x);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int64_t vs;
      const uint8_t* src = v_row(my_slot, j, vs);
      if constexpr (Chunk::kVBytes % 16 == 0) {
#pragma unroll
        for (int pc = 0; pc < Chunk::kVBytes / 16; ++pc) {
          uint4 x = make_uint4(0, 0, 0, 0);
          if (vs >= 0) x = __ldg(reinterpret_cast<const uint4*>(src + 16 * pc));
          put_words(&c.v[j][4 * pc], x);
        }
      } else {
        uint2 x = make_uint2(0, 0);
        if (vs >= 0) x = __ldg(reinterpret_cast<const uint2*>(src));
        c.v[j][0] = x.x;
        c.v[j][1] = x.y;
      }
    }
  };
  Chunk buf_a, buf_b;  // kDirect's two buffers
  if constexpr (kDirect) {
    load_chunk(first_slots[0], buf_a);
  } else {
#pragma unroll
    for (int st = 0; st < kMmaDecodeStages; ++st) copy_chunk(first_slots[st], st, chunk + st * kStep < k_end);
  }

  // Q^T as B fragments: k-step s (word s of the lane's K bytes: piece t + 4 (s / 4), word s % 4),
  // lane (g, t) holds head g's columns kcol(s) + {0, 1} (b0) and + {2, 3} (b1), each as hi and lo
  // parts of the MMA's type; warp 0 writes them to s_q for all the block's warps.
  if (warp == 0) {
    const float qs = q_prescale<Cap>(a.scale);
    const float* qr = a.q + static_cast<int64_t>(row) * a.q_ts + static_cast<int64_t>(h0 + g) * a.q_hs;
#pragma unroll
    for (int s = 0; s < KS; ++s) {
      // k-step s takes 4 of the lane's values: piece t + 4 (s / (VP / 4)) of the row, values
      // 4 (s % (VP / 4)) .. + 3 (FP8: word s of the lane's bytes; 16-bit: words 2s, 2s + 1).
      const int kcol = VP * (t + 4 * (s / (VP / 4))) + 4 * (s % (VP / 4));
      uint32_t qh[2], ql[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float x0 = g < nh ? qr[kcol + 2 * j] * qs : 0.0f;
        const float x1 = g < nh ? qr[kcol + 2 * j + 1] * qs : 0.0f;
        split_x2<M>(x0, x1, qh[j], ql[j]);
      }
      s_q[s][lane] = make_uint4(qh[0], qh[1], ql[0], ql[1]);
    }
  }
  __syncthreads();
  // O^T accumulators, m-tile i: (value column (D/8) g + 2i, heads 2t, 2t + 1), then column + 1.
  float o[MT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};  // heads 2t, 2t + 1 (l: this lane's keys)

  // The chunk at c (in registers) into the softmax state and the accumulators.
  auto compute = [&](const Chunk& cur, int c) {
    // S^T [16 keys x 8 heads]: s[0], s[1] = keys g (heads 2t, 2t + 1); s[2], s[3] = key g + 8.
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int st = 0; st < KS; ++st) {
      uint32_t kf[4];
      if constexpr (kElem == 1) {
        kf[0] = e4m3x2_to_f16x2(cur.k[0][st]), kf[2] = e4m3x2_to_f16x2(cur.k[0][st] >> 16);
        kf[1] = e4m3x2_to_f16x2(cur.k[1][st]), kf[3] = e4m3x2_to_f16x2(cur.k[1][st] >> 16);
      } else {
        kf[0] = cur.k[0][2 * st], kf[2] = cur.k[0][2 * st + 1];
        kf[1] = cur.k[1][2 * st], kf[3] = cur.k[1][2 * st + 1];
      }
      const uint4 qf = s_q[st][lane];
      Mma<M>::mma(s, kf, qf.x, qf.y);
      Mma<M>::mma(s, kf, qf.z, qf.w);
    }
    const bool in0 = c + g < k_end, in1 = c + g + 8 < k_end;
    s[0] = in0 ? score_log2(cap, s[0]) : kNegInf;
    s[1] = in0 ? score_log2(cap, s[1]) : kNegInf;
    s[2] = in1 ? score_log2(cap, s[2]) : kNegInf;
    s[3] = in1 ? score_log2(cap, s[3]) : kNegInf;
    // Each head's max over the 16 keys: this lane's two, then across the 8 lanes of the same t.
    float mx[2] = {fmaxf(s[0], s[2]), fmaxf(s[1], s[3])};
#pragma unroll
    for (int o2 = 4; o2 < 32; o2 <<= 1) {
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], o2));
      mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], o2));
    }
    const bool grow = mx[0] > m[0] || mx[1] > m[1];
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float nm = fmaxf(m[h], mx[h]);
        // m = -inf (no key seen yet): l and the accumulators are 0 and stay so.
        const float alpha = nm == m[h] ? 1.0f : fast_exp2(m[h] - nm);
        m[h] = nm;
        l[h] *= alpha;
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          o[i][h] *= alpha;
          o[i][h + 2] *= alpha;
        }
      }
    }
    float p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float base_m = m[j & 1] == kNegInf ? 0.0f : m[j & 1];
      p[j] = fast_exp2(s[j] - base_m);
      l[j & 1] += p[j];
    }
    // P^T as B fragments: (keys 2t, 2t + 1 | head g) and (keys 2t + 8, 2t + 9 | head g).
    uint32_t ph0, pl0, ph1, pl1;
    split_x2<M>(p[0], p[1], ph0, pl0);
    split_x2<M>(p[2], p[3], ph1, pl1);
    ph0 = transpose_8x8_b16(ph0);
    pl0 = transpose_8x8_b16(pl0);
    ph1 = transpose_8x8_b16(ph1);
    pl1 = transpose_8x8_b16(pl1);
    // V^T A fragments, 16-bit caches: value 2i (2i + 1) of a key's D/8 values -- word i's low (high)
    // half -- is m-tile i's row g (g + 8).
    if constexpr (kElem == 2) {
#pragma unroll
      for (int w = 0; w < MT; ++w) {
        const uint32_t va[4] = {
            __byte_perm(cur.v[0][w], cur.v[1][w], 0x5410), __byte_perm(cur.v[0][w], cur.v[1][w], 0x7632),
            __byte_perm(cur.v[2][w], cur.v[3][w], 0x5410), __byte_perm(cur.v[2][w], cur.v[3][w], 0x7632)};
        Mma<M>::mma(o[w], va, ph0, ph1);
        Mma<M>::mma(o[w], va, pl0, pl1);
      }
    } else {
      // V^T A fragments, FP8: byte 2i (2i + 1) of a key's D/8 bytes is m-tile i's row g (g + 8).
#pragma unroll
      for (int w = 0; w < Chunk::kVBytes / 4; ++w) {
        const uint32_t lo01 = __byte_perm(cur.v[0][w], cur.v[1][w], 0x5140);  // keys 2t, 2t+1: bytes 0, 1
        const uint32_t hi01 = __byte_perm(cur.v[0][w], cur.v[1][w], 0x7362);  // bytes 2, 3
        const uint32_t lo89 = __byte_perm(cur.v[2][w], cur.v[3][w], 0x5140);  // keys 2t+8, 2t+9
        const uint32_t hi89 = __byte_perm(cur.v[2][w], cur.v[3][w], 0x7362);
        // m-tile 2w: rows g (byte 0), g + 8 (byte 1); m-tile 2w + 1: bytes 2, 3.
        const uint32_t va[4] = {e4m3x2_to_f16x2(lo01), e4m3x2_to_f16x2(lo01 >> 16), e4m3x2_to_f16x2(lo89),
                                e4m3x2_to_f16x2(lo89 >> 16)};
        Mma<__half>::mma(o[2 * w], va, ph0, ph1);
        Mma<__half>::mma(o[2 * w], va, pl0, pl1);
        const uint32_t vb[4] = {e4m3x2_to_f16x2(hi01), e4m3x2_to_f16x2(hi01 >> 16), e4m3x2_to_f16x2(hi89),
                                e4m3x2_to_f16x2(hi89 >> 16)};
        Mma<__half>::mma(o[2 * w + 1], vb, ph0, ph1);
        Mma<__half>::mma(o[2 * w + 1], vb, pl0, pl1);
      }
    }
  };
  // The chunk at c (stage st): wait for its group (the later chunks' groups may still be in
  // flight: one group per stage is always committed), read it into registers, compute, then refill
  // the stage with the chunk kMmaDecodeStages steps ahead. That chunk's page-table entries were
  // loaded one step earlier (entries[st], one per stage so that no register copy waits for a
  // load); this step loads the next step's. Looked up in the same step, behind a branch, the load
  // was waited for at once: a third of the stall samples on an H200, and 0.64 -> 0.68-0.69 of copy
  // at batch 128 with 4 heads a block once moved (docs/perf/decode_kernels.md, twenty-fifth
  // section).
  constexpr int kAhead = kMmaDecodeStages * kStep;
  PageEntry entries[kMmaDecodeStages];
  if constexpr (!kDirect) entries[0] = lookup(chunk + kAhead);
  auto step = [&](int st, int c) {
    const PageEntry ahead = entries[st];
    entries[(st + 1) % kMmaDecodeStages] = lookup(c + kAhead + kStep);
    cp_async_wait<kMmaDecodeStages - 1>();
    Chunk cur;
    read_chunk(st, cur);
    compute(cur, c);
    copy_chunk(slot_of(ahead), st, c + kAhead < k_end);
  };
  if constexpr (kDirect) {
    // Chunks c, c1 = c + kStep, ... alternate between the buffers: the next chunk's loads go out
    // (and the one after's page slot is looked up) before the current chunk is computed.
    int64_t slot_b = first_slots[1];
    for (; chunk < k_end; chunk += 2 * kStep) {
      const int c1 = chunk + kStep, c2 = c1 + kStep, c3 = c2 + kStep;
      if (c1 < k_end) load_chunk(slot_b, buf_b);
      const int64_t slot_a = c2 < k_end ? chunk_slot(c2) : -1;
      compute(buf_a, chunk);
      if (c1 >= k_end) break;
      if (c2 < k_end) load_chunk(slot_a, buf_a);
      slot_b = c3 < k_end ? chunk_slot(c3) : -1;
      compute(buf_b, c1);
    }
  } else {
    for (; chunk < k_end; chunk += kAhead) {
#pragma unroll
      for (int st = 0; st < kMmaDecodeStages; ++st) {  // constant stage offsets after unrolling
        if (chunk + st * kStep < k_end) step(st, chunk + st * kStep);
      }
    }
  }
  cp_async_wait<0>();  // no copy may still be writing a stage when the block moves on
  // The warps' partial outputs reuse the stages (s_acc): every warp must be done reading its own.
  __syncthreads();
  auto s_acc = reinterpret_cast<float(*)[HB][D]>(s_kv);  // [NW][HB][D]

  // The warp's row sums over its lanes of the same t, then the warps meet in shared memory.
#pragma unroll
  for (int o2 = 4; o2 < 32; o2 <<= 1) {
    l[0] += __shfl_xor_sync(0xffffffffu, l[0], o2);
    l[1] += __shfl_xor_sync(0xffffffffu, l[1], o2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = 2 * t + h;
    if (head < nh) {
      if (g == 0) {
        s_m[warp][head] = m[h];
        s_l[warp][head] = l[h];
      }
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        s_acc[warp][head][(D / 8) * g + 2 * i] = o[i][h];
        s_acc[warp][head][(D / 8) * g + 2 * i + 1] = o[i][h + 2];
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < nh * D; i += NW * 32) {
    write_merged_states(a, s_m, s_l, s_acc, i / D, i % D, row, r, h0, split, num_splits, partial, lse);
  }
  if (counters != nullptr) merge_splits_if_last<D, HB>(a, num_splits, partial, lse, counters, r, h0, nh);
}

// Warps a block for `blocks` blocks of decode_mma_kernel, whose 4-warp instantiation is
// `kernel4` (smem4 bytes of dynamic shared memory, opted in): 8 when the 4-warp grid would spill
// past one full wave by at most one block a multiprocessor -- those blocks would run alone after
// the wave, each at a fraction of its multiprocessor's rate, where 8-warp blocks (2 a
// multiprocessor) end in fuller rounds -- else 4 (docs/perf/decode_kernels.md, eighteenth
// section). RADIXLM_FP8_DECODE_WARPS=4 or 8 fixes the count (each is the other's reference).
template <typename Kernel>
int mma_decode_warps(Kernel kernel4, int smem4, int64_t blocks) {
  static const int64_t forced = env_int64("RADIXLM_FP8_DECODE_WARPS", 0);
  if (forced != 0) {
    RLM_CHECK(forced == 4 || forced == 8) << "RADIXLM_FP8_DECODE_WARPS must be 4 or 8, not " << forced;
    return static_cast<int>(forced);
  }
  int device = 0;
  RLM_CUDA_ATTN_CHECK(cudaGetDevice(&device));
  const int per_sm = resident_blocks_per_sm(device, reinterpret_cast<const void*>(kernel4), 4 * 32, smem4);
  const int sms = multiprocessor_count(device);
  const int64_t wave = int64_t{per_sm} * sms;
  return blocks > wave && blocks <= wave + sms ? 8 : 4;
}

// Launches decode_mma_kernel for cache type T with the vectorised kernel's grid, splits and merge,
// decode_mma_heads(group) heads a block. FP8 caches: 4 or 8 warps a block (mma_decode_warps);
// bf16 / f16: 4 warps, 2 blocks a multiprocessor (the chunks in registers). The instantiation for
// 8 heads runs every group (its blocks computing only nh of them), but FP8 caches at head_dim 64
// take the 1-, 2- or 4-head one where nh is 1, 2 or 4 (decode_mma_instance): at head_dim 128 the
// 8-head one measured faster for groups of 1, 2 and 4 too (H200, 2,048 keys, batch 32 / 128 / 256,
// group 4: 0.62 / 0.75 / 0.79 of copy -> 0.66-0.69 / 0.79-0.80 / 0.83-0.84; group 2 0.62-0.63 /
// 0.76-0.77 / 0.79-0.80 -> 0.69-0.70 / 0.81 / 0.84-0.85; group 1 0.64 / 0.74 / 0.80-0.81 -> 0.69-0.71
// / 0.81-0.83 / 0.85-0.86), at 64 slower by 1-2% at batch 128-256 (docs/perf/decode_kernels.md,
// twenty-sixth section). decode_mma16 in paged_attention_decode.cu says which groups of 16-bit
// caches come here; any group computes correctly.
template <int D, typename T>
void launch_mma_cap(const DeviceArgs& a, int requested_splits, int64_t max_seq_len) {
  const int splits = decode_split_count(requested_splits, a.batch_size, max_seq_len);
  const int nh = decode_mma_heads(a.num_qo_heads / a.num_kv_heads);
  const int64_t blocks = int64_t{splits} * (a.num_qo_heads / nh) * a.batch_size;
  auto run = [&](auto hb, auto cap) {
    constexpr int HB = decltype(hb)::value;
    // Above 48 KB with the static arrays: the opt-in, per launch as the prefill kernels do (it is
    // per device, and allowed while a graph is captured).
    auto kernel_of = [&](auto nw) {
      constexpr int NW = decltype(nw)::value;
      auto kernel = decode_mma_kernel<D, HB, decltype(cap), NW, T>;
      RLM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          mma_decode_smem_bytes<D, NW, T>()));
      return kernel;
    };
    const auto kernel4 = kernel_of(std::integral_constant<int, 4>{});
    if constexpr (sizeof(T) == 1) {
      if (mma_decode_warps(kernel4, mma_decode_smem_bytes<D, 4, T>(), blocks) == 8) {
        return launch_split_decode<D, HB>(kernel_of(std::integral_constant<int, 8>{}), 8 * 32, a, cap, splits,
                                          max_seq_len, mma_decode_smem_bytes<D, 8, T>(), nh);
      }
    }
    launch_split_decode<D, HB>(kernel4, 4 * 32, a, cap, splits, max_seq_len, mma_decode_smem_bytes<D, 4, T>(),
                               nh);
  };
  auto heads = [&](auto cap) {
    if constexpr (sizeof(T) == 1 && D == 64) {
      switch (decode_mma_instance(nh)) {
        case 1: return run(std::integral_constant<int, 1>{}, cap);
        case 2: return run(std::integral_constant<int, 2>{}, cap);
        case 4: return run(std::integral_constant<int, 4>{}, cap);
        default: break;
      }
    }
    run(std::integral_constant<int, 8>{}, cap);
  };
  if (a.soft_cap > 0.0f) return heads(SoftCap{a.soft_cap});
  heads(NoSoftCap{0.0f});
}

}  // namespace rlm::cuda::attn
