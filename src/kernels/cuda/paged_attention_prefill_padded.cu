// The padded instantiations of the tensor-core prefill kernel (prefill_tc_kernel.cuh): head sizes
// other than the tuned 64 / 128 / 256 (any multiple of 16 up to 256, q/k and v sizes alike or
// not) run at the width padded_head_dim(...) with the columns past them zero-filled. A translation
// unit of its own, so that it compiles in parallel with paged_attention_prefill.cu.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/prefill_tc_kernel.cuh"

namespace rlm::cuda::attn {

void launch_tc_padded(DType dtype, const DeviceArgs& a, int d, int64_t max_qo_len) {
  switch (d) {
    case 64: return launch_tc_dtype<64, true>(dtype, a, max_qo_len);
    case 128: return launch_tc_dtype<128, true>(dtype, a, max_qo_len);
    case 256: return launch_tc_dtype<256, true>(dtype, a, max_qo_len);
    default: fail(str("cuda::paged_attention_prefill: no padded width ", d));
  }
}

}  // namespace rlm::cuda::attn
