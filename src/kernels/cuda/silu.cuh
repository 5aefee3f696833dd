// SiLU in f32 as the CUDA kernels compute it: silu_and_mul (activation.cu) and the FP8 activation
// quantization with SiLU-and-mul folded in (fp8_linear.cu) use this one expression, so their
// products have the same bits.
#pragma once

namespace rlm::cuda {

__device__ __forceinline__ float silu_f32(float g) { return g / (1.0f + expf(-g)); }

}  // namespace rlm::cuda
