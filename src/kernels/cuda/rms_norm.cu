#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rms_norm_row.cuh"

namespace rlm::cuda {
namespace {

__device__ __forceinline__ float* row_ptr(const Rows& r, int64_t row) {
  return r.data + (row / r.n1) * r.stride0 + (row % r.n1) * r.stride1;
}

// One block per row. kFused: residual += x first, then normalise residual into x.
// Each thread touches the same elements in both passes, so in-place (out == x) is safe.
template <bool kFused, typename W>
__global__ void rms_norm_kernel(Rows x, Rows other, int64_t d, const W* weight, float eps) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  float* xr = row_ptr(x, row);
  float* orow = row_ptr(other, row);  // kFused: residual row; else: output row
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    float v = xr[k];
    if constexpr (kFused) {
      v = orow[k] + v;
      orow[k] = v;
    }
    sum += static_cast<double>(v) * v;
  }
  sum = block_sum(sum);
  const float variance = static_cast<float>(sum / static_cast<double>(d));
  const float inv = 1.0f / sqrtf(variance + eps);
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    const float w = to_float(weight[k]);
    if constexpr (kFused) {
      xr[k] = w * (orow[k] * inv);
    } else {
      orow[k] = w * (xr[k] * inv);
    }
  }
}

// The same arithmetic for rows of float4s (d % 4 == 0, 16-byte-aligned rows) of at most
// kVec * kBlock float4s: each thread holds its part of the row in registers and issues every load
// before any store. The loop above cannot do that (its stores may alias its later loads), so each
// thread waits on one load at a time: ~16 us per launch for a 4096-wide row on an H100, whatever the
// number of rows. The sum of squares is in double as above (float products are exact in double; the
// split over threads differs, so sums agree to double rounding), the outputs with the same formula.
// kCodes: the output rows also as FP8 codes and scales (rms_norm_fp8), from the same registers.
template <bool kFused, typename W, int kVec, bool kCodes = false>
__global__ void rms_norm_vec_kernel(Rows x, Rows other, int64_t d, const W* weight, float eps,
                                    Fp8RowCodes codes) {
  const int64_t d4 = d / 4;
  // The weights are constant: loaded before the wait for the kernel that writes x (PDL).
  float4 wf[kVec];
  load_row_weights(weight, d4, wf);
  pdl_wait();
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  float4* xr = reinterpret_cast<float4*>(row_ptr(x, row));
  float4* orow = reinterpret_cast<float4*>(row_ptr(other, row));
  float4 v[kVec];
#pragma unroll
  for (int u = 0; u < kVec; ++u) {
    const int64_t k = row_slot(u);
    if (k < d4) {
      v[u] = xr[k];
      if constexpr (kFused) {
        const float4 r = orow[k];
        v[u] = make_float4(r.x + v[u].x, r.y + v[u].y, r.z + v[u].z, r.w + v[u].w);
      }
    }
  }
  const float inv = row_inv_rms<kFused>(v, d4, d, eps, orow);
  scale_row(v, wf, inv, d4, kFused ? xr : orow);
  if constexpr (kCodes) {
    // quantize_rows_vec_kernel's arithmetic on the same values (a max needs no fixed order).
    float s;
    if (codes.static_scale != nullptr) {
      s = *codes.static_scale;
    } else {
      float amax = 0.0f;
#pragma unroll
      for (int u = 0; u < kVec; ++u) {
        const int64_t k = row_slot(u);
        if (k < d4) {
          amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[u].x), fabsf(v[u].y)), fmaxf(fabsf(v[u].z), fabsf(v[u].w))));
        }
      }
      amax = block_max(amax);
      s = amax > 0.0f ? amax / kF8E4M3Max : 1.0f;
    }
    if (threadIdx.x == 0) codes.scales[row] = s;
    uint32_t* qr = reinterpret_cast<uint32_t*>(codes.q + row * d);
    auto code = [](float f) { return static_cast<uint32_t>(from_float<__nv_fp8_e4m3>(f).__x); };
#pragma unroll
    for (int u = 0; u < kVec; ++u) {
      const int64_t k = row_slot(u);
      if (k < d4) {
        qr[k] = code(v[u].x / s) | code(v[u].y / s) << 8 | code(v[u].z / s) << 16 | code(v[u].w / s) << 24;
      }
    }
  }
  timeline_mark(3);
}

bool float4_rows(const Rows& r) {
  return reinterpret_cast<uintptr_t>(r.data) % 16 == 0 && r.stride0 % 4 == 0 && r.stride1 % 4 == 0;
}

bool vec_rows(const Rows& x, const Rows& other, int64_t d) {
  return row_width_fits(d) && float4_rows(x) && float4_rows(other);
}

// kCodes: rms_norm_fp8 (the register kernel only).
template <bool kFused, bool kCodes = false>
void launch_rms_norm(const Rows& x, const Rows& other, int64_t d, const void* weight, DType weight_dtype,
                     float eps, cudaStream_t stream, const Fp8RowCodes& codes = {}) {
  const int64_t rows = x.n0 * x.n1;
  if (rows == 0 || d == 0) return;
  RLM_CHECK(rows <= 0x7fffffff) << "rms_norm: too many rows " << rows;
  const int64_t per_thread = row_slots(d);  // float4s per thread
  const bool vec = vec_rows(x, other, d);
  RLM_CHECK(vec || !kCodes) << "rms_norm_fp8: rows the register kernel does not take";
  dispatch_float(weight_dtype, [&](auto w) {
    using W = decltype(w);
    const W* wp = static_cast<const W*>(weight);
    const unsigned grid = static_cast<unsigned>(rows);
    if constexpr (!kCodes) {
      if (!vec) {
        launch_pdl(rms_norm_kernel<kFused, W>, dim3(grid), dim3(kBlock), 0, stream, x, other, d, wp, eps);
        return;
      }
    }
    if (per_thread <= 1) {
      launch_pdl(rms_norm_vec_kernel<kFused, W, 1, kCodes>, dim3(grid), dim3(kBlock), 0, stream, x, other, d,
                 wp, eps, codes);
    } else if (per_thread <= 2) {
      launch_pdl(rms_norm_vec_kernel<kFused, W, 2, kCodes>, dim3(grid), dim3(kBlock), 0, stream, x, other, d,
                 wp, eps, codes);
    } else if (per_thread <= 4) {
      launch_pdl(rms_norm_vec_kernel<kFused, W, 4, kCodes>, dim3(grid), dim3(kBlock), 0, stream, x, other, d,
                 wp, eps, codes);
    } else {
      launch_pdl(rms_norm_vec_kernel<kFused, W, kRowMaxVec, kCodes>, dim3(grid), dim3(kBlock), 0, stream, x,
                 other, d, wp, eps, codes);
    }
  });
}

}  // namespace

void rms_norm(int device, const Rows& x, const Rows& out, int64_t d, const void* weight, DType weight_dtype,
              float eps) {
  launch_rms_norm<false>(x, out, d, weight, weight_dtype, eps,
                         static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

void fused_add_rms_norm(int device, const Rows& x, const Rows& residual, int64_t d, const void* weight,
                        DType weight_dtype, float eps) {
  launch_rms_norm<true>(x, residual, d, weight, weight_dtype, eps,
                        static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

bool rms_norm_fp8_applies(const Rows& x, const Rows& other, int64_t d, const void* q) {
  return vec_rows(x, other, d) && reinterpret_cast<uintptr_t>(q) % 16 == 0;
}

void rms_norm_fp8(int device, bool fused, const Rows& x, const Rows& other, int64_t d, const void* weight,
                  DType weight_dtype, float eps, const Fp8RowCodes& codes) {
  RLM_CHECK(rms_norm_fp8_applies(x, other, d, codes.q))
      << "rms_norm_fp8: rows of " << d << " it does not take";
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  if (fused) {
    launch_rms_norm<true, true>(x, other, d, weight, weight_dtype, eps, stream, codes);
  } else {
    launch_rms_norm<false, true>(x, other, d, weight, weight_dtype, eps, stream, codes);
  }
}

}  // namespace rlm::cuda
