// CUDA elementwise kernels of the Gated DeltaNet layers (twin of kernels/cpu/gdn_gates.cpp):
// the GDN gates, the gated RMSNorm and the two sigmoid gates. Same formulas and f32 math as the
// CPU (expf / log1pf, sums of squares in double).
#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/linear_attention.h"

namespace rlm::cuda {
namespace {

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float* row_of(const Rows& r, int64_t row) {
  return r.data + (row / r.n1) * r.stride0 + (row % r.n1) * r.stride1;
}

template <typename A, typename D>
__global__ void gdn_gating_kernel(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n, int64_t heads,
                                  const A* A_log, const D* dt_bias, float* g, int64_t ldg, float* beta,
                                  int64_t ldbeta) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * heads;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / heads, h = idx % heads;
    const float x = a[t * lda + h] + to_float(dt_bias[h]);
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    g[t * ldg + h] = -expf(to_float(A_log[h])) * softplus;
    beta[t * ldbeta + h] = sigmoidf(b[t * ldb + h]);
  }
}

// One block per row; each thread reads and writes the same elements, so out may alias x.
template <typename W>
__global__ void rms_norm_gated_kernel(Rows x, Rows z, Rows out, int64_t d, const W* weight, float eps) {
  const int64_t row = blockIdx.x;
  const float* xr = row_of(x, row);
  const float* zr = row_of(z, row);
  float* o = row_of(out, row);
  double sum = 0.0;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) sum += static_cast<double>(xr[k]) * xr[k];
  sum = block_sum(sum);
  const float inv = 1.0f / sqrtf(static_cast<float>(sum / static_cast<double>(d)) + eps);
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    const float gate = zr[k] * sigmoidf(zr[k]);
    o[k] = (to_float(weight[k]) * (xr[k] * inv)) * gate;
  }
}

__global__ void sigmoid_mul_kernel(Rows x, Rows gate, Rows out, int64_t d) {
  const int64_t total = x.n0 * x.n1 * d;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / d, k = idx % d;
    row_of(out, row)[k] = row_of(x, row)[k] * sigmoidf(row_of(gate, row)[k]);
  }
}

__global__ void sigmoid_gate_add_kernel(const float* x, int64_t ldx, const float* gate, int64_t ldgate, int64_t n,
                                        int64_t d, float* out, int64_t ldo) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * d;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx / d, k = idx % d;
    out[i * ldo + k] += sigmoidf(gate[i * ldgate]) * x[i * ldx + k];
  }
}

cudaStream_t stream_of(int device) { return static_cast<cudaStream_t>(CudaContext::get(device).stream()); }

}  // namespace

void gdn_gating(int device, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n, int64_t heads,
                const void* A_log, DType a_log_dtype, const void* dt_bias, DType dt_dtype, float* g, int64_t ldg,
                float* beta, int64_t ldbeta) {
  if (n * heads == 0) return;
  const cudaStream_t stream = stream_of(device);
  dispatch_float(a_log_dtype, [&](auto al) {
    using A = decltype(al);
    dispatch_float(dt_dtype, [&](auto dt) {
      using D = decltype(dt);
      gdn_gating_kernel<A, D><<<grid_for(n * heads), kBlock, 0, stream>>>(
          a, lda, b, ldb, n, heads, static_cast<const A*>(A_log), static_cast<const D*>(dt_bias), g, ldg, beta, ldbeta);
      RLM_CUDA_CHECK_LAUNCH();
    });
  });
}

void rms_norm_gated(int device, const Rows& x, const Rows& z, const Rows& out, int64_t d, const void* weight,
                    DType weight_dtype, float eps) {
  const int64_t rows = x.n0 * x.n1;
  if (rows == 0 || d == 0) return;
  RLM_CHECK(rows <= 0x7fffffff) << "rms_norm_gated: too many rows " << rows;
  const int threads = d <= 128 ? 128 : kBlock;
  const cudaStream_t stream = stream_of(device);
  dispatch_float(weight_dtype, [&](auto w) {
    using W = decltype(w);
    rms_norm_gated_kernel<W><<<static_cast<unsigned>(rows), threads, 0, stream>>>(x, z, out, d,
                                                                                 static_cast<const W*>(weight), eps);
    RLM_CUDA_CHECK_LAUNCH();
  });
}

void sigmoid_mul(int device, const Rows& x, const Rows& gate, const Rows& out, int64_t d) {
  const int64_t total = x.n0 * x.n1 * d;
  if (total == 0) return;
  sigmoid_mul_kernel<<<grid_for(total), kBlock, 0, stream_of(device)>>>(x, gate, out, d);
  RLM_CUDA_CHECK_LAUNCH();
}

void sigmoid_gate_add(int device, const float* x, int64_t ldx, const float* gate, int64_t ldgate, int64_t n,
                      int64_t d, float* out, int64_t ldo) {
  if (n * d == 0) return;
  sigmoid_gate_add_kernel<<<grid_for(n * d), kBlock, 0, stream_of(device)>>>(x, ldx, gate, ldgate, n, d, out, ldo);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
