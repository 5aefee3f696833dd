#include "kernels/cuda/quant_matmul.h"

#include <cublas_v2.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/index_check.h"

namespace rlm::cuda {
namespace {

__constant__ int8_t kIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

__device__ __forceinline__ int nib(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

// The reference's float operations, rounded one by one (no FMA contraction).
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

__device__ __forceinline__ void k_scale_min(const uint8_t* s, int b, int* sc, int* m) {
  if (b < 4) {
    *sc = s[b] & 63;
    *m = s[b + 4] & 63;
  } else {
    *sc = (s[b + 4] & 15) | (s[b - 4] >> 6) << 4;
    *m = (s[b + 4] >> 4) | (s[b] >> 6) << 4;
  }
}

// Values 32c .. 32c+31 of a weight row (chunk c: a 32-element block, or group c % 8 of super-block
// c / 8), in the reference dequantization's arithmetic (formats/gguf_dequant.cpp).
template <DType T>
__device__ __forceinline__ void dequant_chunk(const uint8_t* row, int64_t c, float* v) {
  if constexpr (T == DType::kQ8_0) {
    const uint8_t* b = row + c * 34;
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) v[j] = mul(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
  } else if constexpr (T == DType::kQ4_0) {
    const uint8_t* b = row + c * 18;
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) v[j] = mul(d, static_cast<float>(nib(b + 2, j) - 8));
  } else if constexpr (T == DType::kQ4_1) {
    const uint8_t* b = row + c * 20;
    const float d = f16_at(b), m = f16_at(b + 2);
    for (int j = 0; j < 32; ++j) v[j] = add(mul(d, static_cast<float>(nib(b + 4, j))), m);
  } else if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
    constexpr int kBytes = T == DType::kQ5_0 ? 22 : 24, kOff = T == DType::kQ5_0 ? 2 : 4;
    const uint8_t* b = row + c * kBytes;
    const float d = f16_at(b), m = T == DType::kQ5_1 ? f16_at(b + 2) : 0.0f;
    const uint32_t qh = b[kOff] | b[kOff + 1] << 8 | b[kOff + 2] << 16 | static_cast<uint32_t>(b[kOff + 3]) << 24;
    for (int j = 0; j < 32; ++j) {
      const int q = nib(b + kOff + 4, j) | static_cast<int>((qh >> j) & 1u) << 4;
      v[j] = T == DType::kQ5_0 ? mul(d, static_cast<float>(q - 16)) : add(mul(d, static_cast<float>(q)), m);
    }
  } else if constexpr (T == DType::kIQ4_NL) {
    const uint8_t* b = row + c * 18;
    const float d = f16_at(b);
    for (int j = 0; j < 32; ++j) v[j] = mul(d, static_cast<float>(kIq4nl[nib(b + 2, j)]));
  } else if constexpr (T == DType::kQ2_K) {
    const uint8_t* b = row + (c / 8) * 84;
    const int g = static_cast<int>(c % 8);
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    for (int j = 0; j < 32; ++j) {
      const int q = b[16 + 32 * (g / 4) + j] >> (2 * (g % 4)) & 3;
      const uint8_t s = b[2 * g + j / 16];
      v[j] = sub(mul(mul(d, static_cast<float>(s & 15)), static_cast<float>(q)), mul(dmin, static_cast<float>(s >> 4)));
    }
  } else if constexpr (T == DType::kQ3_K) {
    const uint8_t* b = row + (c / 8) * 110;
    const int g = static_cast<int>(c % 8);
    const uint8_t* s = b + 96;
    const float d = f16_at(b + 108);
    for (int j = 0; j < 32; ++j) {
      const int i = 2 * g + j / 16;
      const int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
      const int scale = (low | (s[8 + i % 4] >> (2 * (i / 4)) & 3) << 4) - 32;
      const int q = (b[32 + 32 * (g / 4) + j] >> (2 * (g % 4)) & 3) - ((b[j] >> g & 1) ? 0 : 4);
      v[j] = mul(mul(d, static_cast<float>(scale)), static_cast<float>(q));
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    constexpr int kBytes = T == DType::kQ4_K ? 144 : 176, kQs = T == DType::kQ4_K ? 16 : 48;
    const uint8_t* b = row + (c / 8) * kBytes;
    const int g = static_cast<int>(c % 8);
    int sc, m;
    k_scale_min(b + 4, g, &sc, &m);
    const float dl = mul(f16_at(b), static_cast<float>(sc)), ml = mul(f16_at(b + 2), static_cast<float>(m));
    for (int j = 0; j < 32; ++j) {
      int q = b[kQs + 32 * (g / 2) + j] >> (4 * (g % 2)) & 15;
      if (T == DType::kQ5_K) q |= (b[16 + j] >> g & 1) << 4;
      v[j] = sub(mul(dl, static_cast<float>(q)), ml);
    }
  } else if constexpr (T == DType::kQ6_K) {
    const uint8_t* b = row + (c / 8) * 210;
    const float d = f16_at(b + 208);
    for (int j = 0; j < 32; ++j) {
      const int e = static_cast<int>(c % 8) * 32 + j;
      const int low = b[64 * (e / 128) + e % 64] >> (4 * ((e / 64) % 2)) & 15;
      const int high = b[128 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)) & 3;
      const float dl = mul(d, static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
      v[j] = mul(dl, static_cast<float>((low | high << 4) - 32));
    }
  } else if constexpr (T == DType::kIQ4_XS) {
    const uint8_t* b = row + (c / 8) * 136;
    const int g = static_cast<int>(c % 8);
    const int sh = b[2] | b[3] << 8;
    const int s = ((b[4 + g / 2] >> (4 * (g % 2))) & 15) | ((sh >> (2 * g)) & 3) << 4;
    const float dl = mul(f16_at(b), static_cast<float>(s - 32));
    for (int j = 0; j < 32; ++j) v[j] = mul(dl, static_cast<float>(kIq4nl[nib(b + 8 + 16 * g, j)]));
  }
}

__device__ __forceinline__ float load_bias(const void* bias, DType dtype, int64_t j) {
  switch (dtype) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[j]);
    case DType::kF16: return __half2float(static_cast<const __half*>(bias)[j]);
    default: return static_cast<const float*>(bias)[j];
  }
}

constexpr int kGemvWarps = 4;  // output rows per block

// One warp per output row; lane l takes chunks l, l + 32, ... of the row, for all M rows of x.
template <DType T, int M>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_gemv_kernel(const float* __restrict__ x, int64_t k, int64_t ldx, const uint8_t* __restrict__ w,
                      size_t row_bytes, int64_t n, const void* bias, DType bias_dtype, float* __restrict__ out,
                      int64_t ldo) {
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (j >= n) return;
  const uint8_t* row = w + static_cast<size_t>(j) * row_bytes;
  float acc[M];
  for (int r = 0; r < M; ++r) acc[r] = 0.0f;
  for (int64_t c = lane; c < k / 32; c += 32) {
    float v[32];
    dequant_chunk<T>(row, c, v);
    for (int r = 0; r < M; ++r) {
      const float* xr = x + r * ldx + c * 32;
      float s = 0.0f;
#pragma unroll
      for (int t = 0; t < 32; ++t) s = fmaf(v[t], __ldg(xr + t), s);
      acc[r] += s;
    }
  }
  for (int r = 0; r < M; ++r) {
    float s = acc[r];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[r * ldo + j] = s + (bias != nullptr ? load_bias(bias, bias_dtype, j) : 0.0f);
  }
}

// One thread per (row, chunk); ids == nullptr: rows 0..num_rows-1.
template <DType T, typename O>
__global__ void dequant_rows_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t vocab_size,
                                    const int32_t* ids, int64_t ids_stride, int64_t num_rows, int64_t k,
                                    O* __restrict__ out, int64_t ldo, DeviceErrorRecord* rec) {
  const int64_t chunks = k / 32;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < num_rows * chunks;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / chunks, c = idx % chunks;
    const int64_t id = ids != nullptr ? ids[i * ids_stride] : i;
    if (id < 0 || id >= vocab_size) {
      if (c == 0) record_index_error(rec, IndexErrorOp::kEmbedding, i, id, vocab_size);
      continue;
    }
    float v[32];
    dequant_chunk<T>(w + static_cast<size_t>(id) * row_bytes, c, v);
    O* dst = out + i * ldo + c * 32;
    for (int t = 0; t < 32; ++t) dst[t] = from_float<O>(v[t]);
  }
}

// x (f32, row stride ldx) -> bf16 [m, k].
__global__ void x_to_bf16_kernel(const float* x, int64_t m, int64_t k, int64_t ldx, __nv_bfloat16* dst) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * k;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[idx] = __float2bfloat16_rn(x[(idx / k) * ldx + idx % k]);
  }
}

template <typename B>
__global__ void add_bias_kernel(float* out, int64_t m, int64_t n, int64_t ldo, const B* bias) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < m * n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[(idx / n) * ldo + idx % n] += to_float(bias[idx % n]);
  }
}

// Calls f(std::integral_constant<DType, T>) for the block dtype `t`.
template <typename F>
void dispatch_quant(DType t, F&& f) {
  switch (t) {
    case DType::kQ8_0: return f(std::integral_constant<DType, DType::kQ8_0>{});
    case DType::kQ4_0: return f(std::integral_constant<DType, DType::kQ4_0>{});
    case DType::kQ4_1: return f(std::integral_constant<DType, DType::kQ4_1>{});
    case DType::kQ5_0: return f(std::integral_constant<DType, DType::kQ5_0>{});
    case DType::kQ5_1: return f(std::integral_constant<DType, DType::kQ5_1>{});
    case DType::kIQ4_NL: return f(std::integral_constant<DType, DType::kIQ4_NL>{});
    case DType::kQ2_K: return f(std::integral_constant<DType, DType::kQ2_K>{});
    case DType::kQ3_K: return f(std::integral_constant<DType, DType::kQ3_K>{});
    case DType::kQ4_K: return f(std::integral_constant<DType, DType::kQ4_K>{});
    case DType::kQ5_K: return f(std::integral_constant<DType, DType::kQ5_K>{});
    case DType::kQ6_K: return f(std::integral_constant<DType, DType::kQ6_K>{});
    case DType::kIQ4_XS: return f(std::integral_constant<DType, DType::kIQ4_XS>{});
    default: fail(str("cuda quantized linear: ", dtype_name(t), " is not a block-quantized dtype"));
  }
}

template <DType T, int M>
void launch_gemv(const float* x, int64_t k, int64_t ldx, const uint8_t* w, size_t row_bytes, int64_t n,
                 const void* bias, DType bias_dtype, float* out, int64_t ldo, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((n + kGemvWarps - 1) / kGemvWarps);
  quant_gemv_kernel<T, M><<<blocks, kGemvWarps * 32, 0, stream>>>(x, k, ldx, w, row_bytes, n, bias, bias_dtype, out,
                                                                   ldo);
  RLM_CUDA_CHECK_LAUNCH();
}

template <DType T>
void gemv_rows(int64_t m, const float* x, int64_t k, int64_t ldx, const uint8_t* w, size_t row_bytes, int64_t n,
               const void* bias, DType bias_dtype, float* out, int64_t ldo, cudaStream_t stream) {
  switch (m) {
    case 1: return launch_gemv<T, 1>(x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, stream);
    case 2: return launch_gemv<T, 2>(x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, stream);
    case 3: return launch_gemv<T, 3>(x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, stream);
    case 4: return launch_gemv<T, 4>(x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, stream);
    default: return launch_gemv<T, 8>(x, k, ldx, w, row_bytes, n, bias, bias_dtype, out, ldo, stream);
  }
}

template <DType T, typename O>
void launch_dequant_rows(const uint8_t* w, size_t row_bytes, int64_t vocab_size, const int32_t* ids,
                         int64_t ids_stride, int64_t num_rows, int64_t k, O* out, int64_t ldo, DeviceErrorRecord* rec,
                         cudaStream_t stream) {
  dequant_rows_kernel<T, O><<<grid_for(num_rows * (k / 32)), kBlock, 0, stream>>>(w, row_bytes, vocab_size, ids,
                                                                                 ids_stride, num_rows, k, out, ldo, rec);
  RLM_CUDA_CHECK_LAUNCH();
}

int as_int(int64_t v, const char* what) {
  RLM_CHECK(v >= 0 && v <= 0x7fffffff) << "quant_linear: " << what << " = " << v << " does not fit cuBLAS's int";
  return static_cast<int>(v);
}

}  // namespace

void quant_linear(int device, const float* x, int64_t m, int64_t k, int64_t ldx, const void* weight,
                  DType weight_dtype, int64_t n, size_t w_row_bytes, const void* bias, DType bias_dtype, float* out,
                  int64_t ldo) {
  RLM_CHECK(is_quantized(weight_dtype) && k % dtype_block_size(weight_dtype) == 0)
      << "cuda::quant_linear: weight " << dtype_name(weight_dtype) << " with k = " << k;
  if (m == 0 || n == 0) return;
  const auto* w = static_cast<const uint8_t*>(weight);
  // Decode: GEMV launches of 8, 4 or fewer rows of x (5..7 rows run as 4 + the rest).
  if (m <= kQuantGemvMaxRows) {
    const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
    dispatch_quant(weight_dtype, [&](auto t) {
      constexpr DType T = decltype(t)::value;
      int64_t r = 0;
      while (r < m) {
        const int64_t rows = m - r >= 8 ? 8 : m - r >= 4 ? 4 : m - r;
        gemv_rows<T>(rows, x + r * ldx, k, ldx, w, w_row_bytes, n, bias, bias_dtype, out + r * ldo, ldo, stream);
        r += rows;
      }
    });
    return;
  }
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();  // guards the scratch and the handle
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  // Weight rows per GEMM: a bf16 scratch of at most ~64 MiB (at least 256 rows).
  const int64_t chunk = std::min(n, std::max<int64_t>(256, (int64_t{64} << 20) / (2 * k)));
  auto* scratch = static_cast<__nv_bfloat16*>(ctx.scratch(static_cast<size_t>((m + chunk) * k) * 2));
  __nv_bfloat16* xs = scratch;
  __nv_bfloat16* ws = scratch + m * k;
  x_to_bf16_kernel<<<grid_for(m * k), kBlock, 0, stream>>>(x, m, k, ldx, xs);
  RLM_CUDA_CHECK_LAUNCH();
  auto handle = static_cast<cublasHandle_t>(ctx.cublas());
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
    const int64_t rows = std::min(chunk, n - j0);
    dispatch_quant(weight_dtype, [&](auto t) {
      constexpr DType T = decltype(t)::value;
      launch_dequant_rows<T, __nv_bfloat16>(w + static_cast<size_t>(j0) * w_row_bytes, w_row_bytes, rows, nullptr,
                                             0, rows, k, ws, k, nullptr, stream);
    });
    // Column-major: out^T[rows, m] (at column offset j0) = W_chunk^T-as-stored (k x rows)^T * x^T (k x m).
    RLM_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, as_int(rows, "n"), as_int(m, "m"), as_int(k, "k"),
                                  &alpha, ws, CUDA_R_16BF, as_int(k, "k"), xs, CUDA_R_16BF, as_int(k, "k"), &beta,
                                  out + j0, CUDA_R_32F, as_int(ldo, "ldo"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (bias != nullptr) {
    dispatch_float(bias_dtype, [&](auto bt) {
      using B = decltype(bt);
      add_bias_kernel<B><<<grid_for(m * n), kBlock, 0, stream>>>(out, m, n, ldo, static_cast<const B*>(bias));
      RLM_CUDA_CHECK_LAUNCH();
    });
  }
}

void dequantize_rows(int device, const void* weight, DType weight_dtype, size_t w_row_bytes, int64_t vocab_size,
                     const int32_t* ids, int64_t ids_stride, int64_t num_rows, int64_t k, void* out, DType out_dtype,
                     int64_t ldo) {
  RLM_CHECK(is_quantized(weight_dtype) && k % dtype_block_size(weight_dtype) == 0)
      << "cuda::dequantize_rows: weight " << dtype_name(weight_dtype) << " with k = " << k;
  if (num_rows == 0 || k == 0) return;
  DeviceErrorRecord* rec = ids != nullptr ? check_token_ids(device, ids, num_rows, ids_stride, vocab_size) : nullptr;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const auto* w = static_cast<const uint8_t*>(weight);
  dispatch_quant(weight_dtype, [&](auto t) {
    constexpr DType T = decltype(t)::value;
    dispatch_float(out_dtype, [&](auto o) {
      using O = decltype(o);
      launch_dequant_rows<T, O>(w, w_row_bytes, vocab_size, ids, ids_stride, num_rows, k, static_cast<O*>(out), ldo,
                                rec, stream);
    });
  });
}

}  // namespace rlm::cuda
