#include "kernels/cuda/embedding.h"

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/index_check.h"

namespace rlm::cuda {
namespace {

// One block per token, threads stride over the hidden dimension.
// A bad id (deferred checks only; see index_check.h) is recorded and its row left unwritten.
template <typename W, typename O>
__global__ void embedding_kernel(const int32_t* ids, int64_t ids_stride, const W* weight, int64_t weight_stride,
                                 int64_t vocab_size, int64_t hidden, O* out, int64_t out_stride,
                                 DeviceErrorRecord* rec) {
  const int64_t t = blockIdx.x;
  const int64_t id = ids[t * ids_stride];
  if (id < 0 || id >= vocab_size) {
    if (threadIdx.x == 0) record_index_error(rec, IndexErrorOp::kEmbedding, t, id, vocab_size);
    return;
  }
  const W* src = weight + id * weight_stride;
  O* dst = out + t * out_stride;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) dst[j] = from_float<O>(to_float(src[j]));
}

template <typename W, typename O>
void launch_embedding(const int32_t* ids, int64_t num_tokens, int64_t ids_stride, const W* weight,
                      int64_t weight_stride, int64_t vocab_size, int64_t hidden, O* out, int64_t out_stride,
                      DeviceErrorRecord* rec, cudaStream_t stream) {
  embedding_kernel<W, O><<<static_cast<unsigned>(num_tokens), kBlock, 0, stream>>>(
      ids, ids_stride, weight, weight_stride, vocab_size, hidden, out, out_stride, rec);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding(int device, const int32_t* ids, int64_t num_tokens, int64_t ids_stride, const void* weight,
               DType weight_dtype, int64_t weight_stride, int64_t vocab_size, int64_t hidden, void* out,
               DType out_dtype, int64_t out_stride) {
  if (num_tokens == 0) return;
  RLM_CHECK(num_tokens <= 0x7fffffff) << "embedding: too many tokens " << num_tokens;
  DeviceErrorRecord* rec = check_token_ids(device, ids, num_tokens, ids_stride, vocab_size);
  if (hidden == 0) return;
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  dispatch_float(weight_dtype, [&](auto w) {
    using W = decltype(w);
    dispatch_float(out_dtype, [&](auto o) {
      using O = decltype(o);
      launch_embedding(ids, num_tokens, ids_stride, static_cast<const W*>(weight), weight_stride, vocab_size, hidden,
                       static_cast<O*>(out), out_stride, rec, stream);
    });
  });
}

}  // namespace rlm::cuda
