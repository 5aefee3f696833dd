// The padded instantiations of the vectorised decode kernel (decode_vec_kernel.cuh): head sizes
// other than the tuned 64 / 128 / 256 (any multiple of 16 up to 256, q/k and v sizes alike or
// not) run at the width padded_head_dim(...) with the columns past them masked. bf16/f16/FP8 caches
// (f32 caches of these sizes take the scalar kernel). A translation unit of its own,
// so that it compiles in parallel with paged_attention_decode.cu.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/decode_vec_kernel.cuh"

namespace rlm::cuda::attn {
namespace {

template <int D>
void launch_padded_dtype(DType dtype, const DeviceArgs& a, int requested_splits, int64_t max_seq_len) {
  switch (dtype) {
    case DType::kBF16: return launch_vec_cap<D, __nv_bfloat16, true>(a, requested_splits, max_seq_len);
    case DType::kF16: return launch_vec_cap<D, __half, true>(a, requested_splits, max_seq_len);
    case DType::kF8E4M3: return launch_vec_cap<D, __nv_fp8_e4m3, true>(a, requested_splits, max_seq_len);
    default: fail(str("cuda::paged_attention_decode: no padded vectorised kernel for ", dtype_name(dtype)));
  }
}

}  // namespace

void launch_vec_padded(DType dtype, const DeviceArgs& a, int d, int requested_splits, int64_t max_seq_len) {
  switch (d) {
    case 64: return launch_padded_dtype<64>(dtype, a, requested_splits, max_seq_len);
    case 128: return launch_padded_dtype<128>(dtype, a, requested_splits, max_seq_len);
    case 256: return launch_padded_dtype<256>(dtype, a, requested_splits, max_seq_len);
    default: fail(str("cuda::paged_attention_decode: no padded width ", d));
  }
}

}  // namespace rlm::cuda::attn
