// GPU builder of kv_indptr / kv_indices from req_to_token (see cuda::build_kv_indices): one block
// scans the per-request page counts (chunked Hillis-Steele scan in shared memory), then one block
// per request fills its page ids. Fixed-size outputs and no host synchronisation, so the two
// launches can be captured in a CUDA graph.
#include <climits>
#include <limits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/paged_attention.h"

namespace rlm::cuda {
namespace {

constexpr int kScanThreads = 256;
constexpr int kFillThreads = 128;

// Pages of request r, or -1 when its data is bad.
__device__ __forceinline__ int64_t pages_of(const int32_t* req_pool_indices, const int32_t* seq_lens, int64_t r,
                                            int64_t max_reqs, int64_t max_ctx, int64_t page_size) {
  const int64_t pool = req_pool_indices[r], len = seq_lens[r];
  if (pool < 0 || pool >= max_reqs || len < 0 || len > max_ctx) return -1;
  return (len + page_size - 1) / page_size;
}

__global__ void __launch_bounds__(kScanThreads)
    scan_kernel(const int32_t* req_pool_indices, const int32_t* seq_lens, int64_t bs, int64_t max_reqs,
                int64_t max_ctx, int64_t page_size, int64_t capacity, int32_t* kv_indptr, int32_t* error) {
  __shared__ int64_t s_scan[kScanThreads];
  __shared__ int64_t s_carry;
  __shared__ int s_error;  // lowest bad request + 1, INT_MAX when none
  const int tid = threadIdx.x;
  if (tid == 0) {
    s_carry = 0;
    s_error = INT_MAX;
    kv_indptr[0] = 0;
  }
  __syncthreads();
  for (int64_t base = 0; base < bs; base += kScanThreads) {
    const int64_t r = base + tid;
    int64_t n = 0;
    if (r < bs) {
      n = pages_of(req_pool_indices, seq_lens, r, max_reqs, max_ctx, page_size);
      if (n < 0) {
        atomicMin(&s_error, static_cast<int>(r + 1));
        n = 0;
      }
    }
    s_scan[tid] = n;
    __syncthreads();
    for (int off = 1; off < kScanThreads; off <<= 1) {
      const int64_t add = tid >= off ? s_scan[tid - off] : 0;
      __syncthreads();
      s_scan[tid] += add;
      __syncthreads();
    }
    const int64_t end = s_carry + s_scan[tid];
    if (r < bs) {
      if (end > capacity) atomicMin(&s_error, static_cast<int>(r + 1));
      kv_indptr[r + 1] = static_cast<int32_t>(end > capacity ? capacity : end);
    }
    __syncthreads();  // everyone has read s_carry and s_scan
    if (tid == kScanThreads - 1) s_carry = end;
    __syncthreads();
  }
  if (tid == 0) *error = s_error == INT_MAX ? 0 : s_error;
}

// Grid (bs): request r writes its pages when its data are good and fit in the capacity.
__global__ void __launch_bounds__(kFillThreads)
    fill_kernel(const int32_t* req_to_token, int64_t max_reqs, int64_t max_ctx, int64_t stride,
                const int32_t* req_pool_indices, const int32_t* seq_lens, int64_t page_size, const int32_t* kv_indptr,
                int32_t* kv_indices, int64_t capacity) {
  const int64_t r = blockIdx.x;
  const int64_t n = pages_of(req_pool_indices, seq_lens, r, max_reqs, max_ctx, page_size);
  const int64_t begin = kv_indptr[r];
  if (n < 0 || begin + n > capacity || kv_indptr[r + 1] != begin + n) return;
  const int32_t* row = req_to_token + static_cast<int64_t>(req_pool_indices[r]) * stride;
  for (int64_t i = threadIdx.x; i < n; i += kFillThreads) {
    kv_indices[begin + i] = static_cast<int32_t>(row[i * page_size] / page_size);
  }
}

}  // namespace

void build_kv_indices(const int32_t* req_to_token, int64_t max_reqs, int64_t max_ctx, int64_t req_to_token_stride,
                      const int32_t* req_pool_indices, const int32_t* seq_lens, int64_t batch_size,
                      int64_t page_size, int32_t* kv_indptr, int32_t* kv_indices, int64_t capacity,
                      int32_t* error) {
  RLM_CHECK(page_size > 0) << "cuda::build_kv_indices: page_size must be positive, got " << page_size;
  RLM_CHECK(batch_size >= 0 && batch_size <= 65535 * 1024)
      << "cuda::build_kv_indices: bad batch size " << batch_size;
  RLM_CHECK(capacity >= 0 && capacity <= std::numeric_limits<int32_t>::max())
      << "cuda::build_kv_indices: capacity " << capacity << " is beyond i32 indices";
  RLM_CHECK(req_to_token_stride >= max_ctx) << "cuda::build_kv_indices: row stride " << req_to_token_stride
                                            << " is smaller than max_ctx " << max_ctx;
  const cudaStream_t stream = attn::current_stream();
  scan_kernel<<<1, kScanThreads, 0, stream>>>(req_pool_indices, seq_lens, batch_size, max_reqs, max_ctx, page_size, capacity,
                                   kv_indptr, error);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
  if (batch_size == 0) return;
  fill_kernel<<<static_cast<unsigned>(batch_size), kFillThreads, 0, stream>>>(req_to_token, max_reqs, max_ctx,
                                                                   req_to_token_stride, req_pool_indices, seq_lens,
                                                                   page_size, kv_indptr, kv_indices, capacity);
  RLM_CUDA_ATTN_CHECK(cudaGetLastError());
}

}  // namespace rlm::cuda
