// Warp-level tensor-core helpers (sm_80 and later, so also sm_90a): 16- and 8-byte cp.async with
// zero fill, ldmatrix (plain and transposed), mma.sync m16n8k16 with bf16 or f16 inputs and f32
// accumulators, and packing of two floats into one 32-bit operand register. Fragment layouts are
// those of the PTX ISA ("Matrix Fragments for mma.m16n8k16"): with g = lane / 4, t = lane % 4,
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8, f32):  c0, c1 = (g, 2t), (g, 2t+1); c2, c3 = (g+8, 2t), (g+8, 2t+1)
// (lower 16 bits of a packed register = the lower column / k index).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace rlm::cuda::attn {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define RLM_MMA_UNSUPPORTED 1  // the tensor-core kernels are only launched on sm_80+ (host check)
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared asynchronously; src_bytes == 0 writes 16 zero bytes instead
// (src must still be a valid address).
__device__ __forceinline__ void cp_async16(void* dst_smem, const void* src, int src_bytes) {
#ifndef RLM_MMA_UNSUPPORTED
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst_smem)), "l"(src),
               "r"(src_bytes)
               : "memory");
#else
  __trap();
#endif
}
// The same 16 bytes through L1 (.ca) with the .L2::128B hint (the L2 fetches the source's whole
// 128-byte line: a warp that reads half a line per instruction gets whole lines from DRAM,
// eleventh section of docs/perf/decode_kernels.md); L1 gathers a warp's pieces of one
// 128-byte line into one L2 request (several sectors), where .cg sends L2 about one request a
// sector. The FP8 decode kernel's copies (16-byte pieces, half a line a row an instruction): L2 tag
// lookups 88% -> 38% busy, 0.72 -> 0.79 of copy bandwidth on an H200 (docs/perf/decode_kernels.md,
// twenty-sixth section).
__device__ __forceinline__ void cp_async16_l1(void* dst_smem, const void* src, int src_bytes) {
#ifndef RLM_MMA_UNSUPPORTED
  asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst_smem)),
               "l"(src), "r"(src_bytes)
               : "memory");
#else
  __trap();
#endif
}
// 8 bytes (the FP8 caches' 8-column chunks); zero-filled past src_bytes. .ca: .cg takes 16 only.
template <bool kPrefetch128 = false>
__device__ __forceinline__ void cp_async8(void* dst_smem, const void* src, int src_bytes) {
#ifndef RLM_MMA_UNSUPPORTED
  if constexpr (kPrefetch128) {
    asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst_smem)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst_smem)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  }
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef RLM_MMA_UNSUPPORTED
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef RLM_MMA_UNSUPPORTED
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
#ifndef RLM_MMA_UNSUPPORTED
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
#ifndef RLM_MMA_UNSUPPORTED
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
#else
  __trap();
#endif
}

// The 16-bit input type of the tensor-core path: packing and the matching mma.
template <typename T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
  }
  // c += a * b
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifndef RLM_MMA_UNSUPPORTED
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
  }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifndef RLM_MMA_UNSUPPORTED
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
  }
};

// Element offset of column `col` (a multiple of 8) of row `row` in a [rows][D] 16-bit tile whose
// 16-byte chunks are XOR-swizzled by row % 8: the 8 rows an ldmatrix reads hit 8 distinct bank
// groups (needs D >= 64).
template <int D>
__device__ __forceinline__ int swizzle(int row, int col) {
  static_assert(D % 64 == 0, "swizzle needs at least 8 chunks per row");
  return row * D + ((((col >> 3) ^ (row & 7))) << 3);
}

}  // namespace rlm::cuda::attn
