// The tensor-core prefill kernel (prefill_tc_kernel.cuh) on FP8 (e4m3) caches: tiles widened to f16
// in shared memory, f16 products. Tuned instantiations for head_dim 64 / 128 / 256 and padded ones
// for the other sizes; a translation unit of its own, so that it compiles in parallel with the
// 16-bit caches' ones.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/prefill_tc_kernel.cuh"

namespace rlm::cuda::attn {

void launch_tc_fp8(const DeviceArgs& a, int d, bool padded, int64_t max_qo_len) {
  using E = __nv_fp8_e4m3;
  if (padded) {
    switch (d) {
      case 64: return launch_tc_variant<64, __half, true, E>(a, max_qo_len);
      case 128: return launch_tc_variant<128, __half, true, E>(a, max_qo_len);
      case 256: return launch_tc_variant<256, __half, true, E>(a, max_qo_len);
      default: break;
    }
  } else {
    switch (d) {
      case 64: return launch_tc_variant<64, __half, false, E>(a, max_qo_len);
      case 128: return launch_tc_variant<128, __half, false, E>(a, max_qo_len);
      case 256: return launch_tc_variant<256, __half, false, E>(a, max_qo_len);
      default: break;
    }
  }
  fail(str("cuda::paged_attention_prefill: no FP8 tensor-core width ", d));
}

}  // namespace rlm::cuda::attn
