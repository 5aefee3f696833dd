// Shared device helpers of the CUDA attention kernels: an error-check macro, element loads that
// widen f32/bf16/f16 to f32, warp reductions, and the score transforms (soft-cap on/off) that the
// kernels take as template parameters so the inner loops carry no runtime branches for them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/caching_allocator.h"
#include "core/check.h"
#include "core/device.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/device_facts.h"

// Throws rlm::Error naming the call and the CUDA error (local to the attention kernels).
#define RLM_CUDA_ATTN_CHECK(expr)                                                        \
  do {                                                                                   \
    const cudaError_t rlm_attn_err_ = (expr);                                            \
    RLM_CHECK(rlm_attn_err_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(rlm_attn_err_); \
  } while (0)

namespace rlm::cuda::attn {

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;  // the fast kernels keep scores in log2 units (exp2f)
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float load_f32(const float* p) { return *p; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load_f32(const __half* p) { return __half2float(*p); }
// FP8 caches: the raw e4m3 value; k_scale is folded into DeviceArgs::scale and v_scale applied to
// the output (decode: as it is written, DeviceArgs::out_scale; prefill: afterwards,
// scale_attention_output), which is exact up to f32 rounding.
__device__ __forceinline__ float load_f32(const __nv_fp8_e4m3* p) { return static_cast<float>(*p); }

// Two e4m3 values (the low byte first) as f16x2 (low half first), exactly (every e4m3 value is an
// f16 value), for the tensor-core kernels that read FP8 caches.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}
// Eight e4m3 values as eight f16 values, in order.
__device__ __forceinline__ uint4 e4m3x8_to_f16x8(uint2 b) {
  return make_uint4(e4m3x2_to_f16x2(b.x), e4m3x2_to_f16x2(b.x >> 16), e4m3x2_to_f16x2(b.y),
                    e4m3x2_to_f16x2(b.y >> 16));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 2^x with one MUFU instruction (ex2.approx.ftz: relative error ~2^-22, 2^-inf = 0, subnormal
// results flushed to 0), for the softmax numerators of the fast kernels.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Score transforms: s = scale * q.k, then (optionally) cap * tanh(s / cap).
struct NoSoftCap {
  static constexpr bool kEnabled = false;
  float cap;
  __device__ __forceinline__ float operator()(float s) const { return s; }
};
struct SoftCap {
  static constexpr bool kEnabled = true;
  float cap;
  __device__ __forceinline__ float operator()(float s) const { return cap * tanhf(s / cap); }
};

// The log2-domain score convention of the vectorised decode and tensor-core prefill kernels: q is
// multiplied by q_prescale(scale) once, and score_log2(cap, q'.k) = log2(e) * cap(scale * q.k).
// Without a soft-cap log2(e) is folded into q, so the inner loop does no extra multiply.
template <typename Cap>
__host__ __device__ __forceinline__ float q_prescale(float scale) {
  return Cap::kEnabled ? scale : scale * kLog2e;
}
template <typename Cap>
__device__ __forceinline__ float score_log2(const Cap& cap, float dot) {
  if constexpr (Cap::kEnabled) {
    return cap(dot) * kLog2e;
  } else {
    return dot;
  }
}

// Device pointers and sizes of one call (strides in elements; last strides are 1).
struct DeviceArgs {
  const float* q = nullptr;  // [num_tokens, num_qo_heads, head_dim]
  int64_t q_ts = 0, q_hs = 0;
  const void* k = nullptr;  // [num_slots, num_kv_heads, head_dim]
  const void* v = nullptr;  // [num_slots, num_kv_heads, v_head_dim]
  int64_t k_ts = 0, k_hs = 0;
  int64_t v_ts = 0, v_hs = 0;
  float* out = nullptr;  // [num_tokens, num_qo_heads, v_head_dim]
  int64_t out_ts = 0, out_hs = 0;
  const int32_t* qo_indptr = nullptr;   // [bs + 1]
  const int32_t* kv_indptr = nullptr;   // [bs + 1]
  const int32_t* kv_indices = nullptr;  // [nnz_pages]
  const int32_t* seq_lens = nullptr;    // [bs]
  int32_t batch_size = 0;
  int32_t page_size = 1;
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  float scale = 1.0f;
  // Decode kernels only (the prefill kernels leave it to scale_attention_output): the output is
  // multiplied by it as it is written (FP8 caches: v_scale; 1 otherwise).
  float out_scale = 1.0f;
  int32_t sliding_window = -1;
  float soft_cap = 0.0f;
  // Cascade attention (prefill kernels only): optional per-request key ranges [kv_begin, kv_end)
  // (null: [0, seq_len)) and optional lse output [num_tokens, num_qo_heads] (natural log; -inf and
  // a zero output row when a query sees no key).
  const int32_t* kv_begin = nullptr;  // [bs]
  const int32_t* kv_end = nullptr;    // [bs]
  float* lse = nullptr;
  int64_t lse_ts = 0;
  // Head sizes: q/k (head_dim) and v/out (v_head_dim), multiples of 16 up to 256. A kernel
  // instantiated for a width D above them (the padded variants, see check_head_dims) reads zeros
  // for the columns past them and writes no output column past v_head_dim.
  int32_t head_dim = 0;
  int32_t v_head_dim = 0;
};

// Largest head size of the CUDA attention kernels.
constexpr int64_t kMaxHeadDim = 256;

// Throws rlm::Error (naming `op`) unless head_dim and v_dim are multiples of 16 in [16, 256].
void check_head_dims(const char* op, const cpu::AttnConfig& cfg);

// The head sizes with their own (tuned) kernel instantiations: head_dim == v_dim, 64, 128 or 256.
// Every other pair runs a padded instantiation of width padded_head_dim(...).
inline bool tuned_head_dim(const cpu::AttnConfig& cfg) {
  return cfg.head_dim == cfg.v_dim() && (cfg.head_dim == 64 || cfg.head_dim == 128 || cfg.head_dim == 256);
}

// The instantiated width for head sizes (head_dim, v_dim): the smallest of 64, 128, 256 that holds
// both.
inline int padded_head_dim(const cpu::AttnConfig& cfg) {
  const int64_t d = cfg.head_dim > cfg.v_dim() ? cfg.head_dim : cfg.v_dim();
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

// Slot of key position `pos` of a request whose pages start at `pages`.
__device__ __forceinline__ int64_t slot_of(const int32_t* pages, int32_t page_size, int32_t pos) {
  return static_cast<int64_t>(pages[pos / page_size]) * page_size + pos % page_size;
}

// The page table of one request, with a shift/mask fast path when page_size is a power of two
// (the usual 1, 16, 64; decided once per block, uniform, so no divergence).
struct PageMap {
  const int32_t* pages;
  int32_t page_size;
  int32_t shift;  // log2(page_size), or -1 when page_size is not a power of two

  __device__ __forceinline__ PageMap(const int32_t* p, int32_t ps) : pages(p), page_size(ps), shift(-1) {
#ifdef __CUDA_ARCH__
    if ((ps & (ps - 1)) == 0) shift = __ffs(ps) - 1;
#endif
  }
  // Index into `pages` and offset within the page of key position `pos` (arithmetic only).
  __device__ __forceinline__ void locate(int32_t pos, int32_t& index, int32_t& offset) const {
    if (shift >= 0) {
      index = pos >> shift;
      offset = pos & (page_size - 1);
    } else {
      index = pos / page_size;
      offset = pos - index * page_size;
    }
  }
  __device__ __forceinline__ int64_t slot(int32_t pos) const {
    int32_t index, offset;
    locate(pos, index, offset);
    return static_cast<int64_t>(pages[index]) * page_size + offset;
  }
};

// Packs the host-side descriptions (all pointers on the device) into kernel arguments.
DeviceArgs make_device_args(const cpu::AttnRows& q, const cpu::AttnRows& k_cache, const cpu::AttnRows& v_cache,
                            const cpu::PagedBatch& b, const cpu::AttnConfig& cfg, float* out, int64_t out_ts,
                            int64_t out_hs);

// The stream of the current device (core's cuda_stream): every attention kernel runs on it, so the
// launches order with the other ops and can be captured into a CUDA graph.
// FP8 caches with v_scale != 1: out *= v_scale over the batch's rows (the kernels sum raw e4m3
// values); a no-op otherwise. Also scales rows a partial call leaves empty (zeros stay zeros).
void scale_attention_output(const cpu::AttnRows& k_cache, const cpu::PagedBatch& b, const cpu::AttnConfig& cfg,
                            float* out, int64_t out_ts, int64_t out_hs);

// Whether the current device runs the mma.sync kernels (sm_80 and later; mma_sm80.cuh).
inline bool tensor_core_device() {
  int device = 0;
  RLM_CUDA_ATTN_CHECK(cudaGetDevice(&device));
  return compute_capability(device) >= 80;
}

inline cudaStream_t current_stream() {
  int device = 0;
  RLM_CUDA_ATTN_CHECK(cudaGetDevice(&device));
  return static_cast<cudaStream_t>(cuda_stream(device));
}

// A scratch allocation from the current device's caching allocator, freed on scope exit. Safe while
// kernels still use it: every op runs on the one stream, so the next user of the block is queued
// behind them. Inside a CUDA-graph capture it comes from the graph pool.
class AsyncBuffer {
 public:
  explicit AsyncBuffer(size_t nbytes) {
    RLM_CUDA_ATTN_CHECK(cudaGetDevice(&device_));
    data_ = cuda_allocator(device_).allocate(nbytes == 0 ? 1 : nbytes);
  }
  ~AsyncBuffer() { cuda_allocator(device_).free(data_); }
  AsyncBuffer(const AsyncBuffer&) = delete;
  AsyncBuffer& operator=(const AsyncBuffer&) = delete;
  void* data() const { return data_; }

 private:
  int device_ = 0;
  void* data_ = nullptr;
};

}  // namespace rlm::cuda::attn
