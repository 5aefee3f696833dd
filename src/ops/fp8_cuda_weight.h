// The device view (cuda::Fp8Weight) of an FP8 weight and its ops::Fp8Scales, as ops::linear hands
// it to cuda::fp8_linear: for callers that ask cuda::fp8_linear_path which path a product takes
// (`radixlm bench gemv --dtype fp8_e4m3`). CUDA builds only.
#pragma once

#ifdef RADIXLM_WITH_CUDA
#include "core/tensor.h"
#include "kernels/cuda/fp8_linear.h"
#include "ops/ops.h"

namespace rlm::ops {

// weight: f8e4m3 [n, k] (rows may be strided) on the device of the scales' tensors.
cuda::Fp8Weight cuda_fp8_weight(const Tensor& weight, const Fp8Scales& scales);

}  // namespace rlm::ops
#endif
