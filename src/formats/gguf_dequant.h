// Dequantization of GGUF tensor data into float32, with ggml's block layouts:
//   F32, F16, BF16           plain elements
//   Q8_0 (32 per 34 bytes)   f16 d, int8 q[32]               x = q * d
//   Q4_0 (32 per 18 bytes)   f16 d, uint8 qs[16]             x = (nibble - 8) * d
//   Q4_1 (32 per 20 bytes)   f16 d, f16 m, uint8 qs[16]      x = nibble * d + m
// In Q4_0/Q4_1 the low nibble of qs[j] is element j and the high nibble element j + 16.
// Every other ggml type (Q5_0, Q5_1, Q8_1, K-quants, IQ*, TQ*, MXFP4, integer types) is
// recognised and rejected with kUnimplemented.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/gguf.h"

namespace rlm {

bool gguf_can_dequantize(GgmlType type);

// Dequantizes `numel` elements stored as `type` in `data` into `out` (`numel` floats).
// kUnimplemented for unsupported types; kInvalidArgument when `numel` is not a whole number of
// blocks or `data` does not hold exactly that many blocks.
Status dequantize_to_f32(GgmlType type, std::span<const uint8_t> data, int64_t numel, float* out);

// Tensor `info` of `file` as a new f32 CPU tensor of shape info.shape. Errors name the tensor.
StatusOr<Tensor> dequantize_tensor(const GgufFile& file, const GgufTensorInfo& info);

}  // namespace rlm
