#include "kernels/cuda/rotary.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/index_check.h"
#include "kernels/cuda/pdl.cuh"

namespace rlm::cuda {
namespace {

// One thread per (token, head of q then k, rotation pair); grid-stride. A position outside the cache
// (deferred checks only, see index_check.h) is recorded and its token left unrotated.
__global__ void rotary_kernel(Heads q, Heads k, int64_t num_tokens, const void* positions, bool pos_i64,
                              int64_t pos_stride, const float* cos_sin, int64_t max_positions, int64_t rotary_dim,
                              bool is_neox, DeviceErrorRecord* rec) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t half = rotary_dim / 2;
  const int64_t heads = q.num_heads + k.num_heads;
  const int64_t total = num_tokens * heads * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % heads;
    const int64_t t = idx / (half * heads);
    const Heads& hs = h < q.num_heads ? q : k;
    const int64_t hh = h < q.num_heads ? h : h - q.num_heads;
    float* x = hs.data + t * hs.token_stride + hh * hs.head_stride;
    const int64_t pos = load_index(positions, pos_i64, t, pos_stride);
    if (pos < 0 || pos >= max_positions) {
      if (h == 0 && i == 0) record_index_error(rec, IndexErrorOp::kRotary, t, pos, max_positions);
      continue;
    }
    const float* row = cos_sin + pos * rotary_dim;
    const float c = row[i], s = row[half + i];
    const int64_t a = is_neox ? i : 2 * i;
    const int64_t b = is_neox ? i + half : 2 * i + 1;
    const float x1 = x[a], x2 = x[b];
    x[a] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));  // no FMA contraction: same rounding as the CPU
    x[b] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
  }
}

void launch_rotary(const Heads& q, const Heads& k, int64_t num_tokens, const void* positions, bool pos_i64,
                   int64_t pos_stride, const float* cos_sin, int64_t max_positions, int64_t rotary_dim, bool is_neox,
                   DeviceErrorRecord* rec, cudaStream_t stream) {
  const int64_t total = num_tokens * (q.num_heads + k.num_heads) * (rotary_dim / 2);
  if (total == 0) return;
  launch_pdl(rotary_kernel, dim3(grid_for(total)), dim3(kBlock), 0, stream, q, k, num_tokens, positions,
             pos_i64, pos_stride, cos_sin, max_positions, rotary_dim, is_neox, rec);
}

}  // namespace

void rotary_embedding(int device, const Heads& q, const Heads& k, int64_t num_tokens, const void* positions,
                      DType positions_dtype, int64_t positions_stride, const float* cos_sin, int64_t max_positions,
                      int64_t rotary_dim, bool is_neox) {
  if (num_tokens == 0) return;
  DeviceErrorRecord* rec = nullptr;
  if (DeferredIndexChecks::active()) {
    rec = device_error_record(device);
  } else {
    const BadIndex bad =
        find_out_of_range(device, positions, positions_dtype, num_tokens, positions_stride, max_positions);
    if (bad.position >= 0) {
      fail(str("rotary_embedding: position ", bad.value, " of token ", bad.position,
               " is outside the cos/sin cache [0, ", max_positions, ")"));
    }
  }
  launch_rotary(q, k, num_tokens, positions, positions_dtype == DType::kI64, positions_stride, cos_sin, max_positions,
                rotary_dim, is_neox, rec, static_cast<cudaStream_t>(CudaContext::get(device).stream()));
}

}  // namespace rlm::cuda
