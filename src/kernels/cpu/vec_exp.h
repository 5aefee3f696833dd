// A vectorised expf for the attention softmax and SiLU: 8 floats at a time with GCC/Clang vector
// extensions, elementwise, so an element's result does not depend on its neighbours, on where a
// row starts, on the vector width the compiler picks (SSE/AVX) or on the batch. The arithmetic
// (no FMA: the project builds ISO C++ without contraction) is the same for every element, full
// vectors and tails alike, which keeps a prefill's rows bit-identical to decode steps.
//
// Method: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 in two parts, the first
// exact in 9 bits so n * ln2_hi is exact), e^r by a degree-7 polynomial (the Cephes expf
// coefficients), and 2^n applied as two exact power-of-two factors, so results down to the
// smallest subnormal are rounded once. Accuracy against double-precision exp: at most 1 ulp
// over the whole float range of x (checked by tests/unit/vec_exp_test.cpp, which sweeps it);
// x <= -104 gives 0 (e^-104 is below half the smallest subnormal), x >= 88.8 +inf, NaN NaN.
#pragma once

#include <cstdint>

namespace rlm::cpu {

// y[i] = e^x[i] for i < n (y may equal x).
void exp_f32(const float* x, float* y, int64_t n);

struct MaxExpSum {
  float max;  // max of the inputs (-inf when n == 0)
  float sum;  // sum of e^(s[i] - max), in a fixed order that depends only on n
};

// The softmax's two passes over one row of scores: s[i] = e^(s[i] - max) in place (with
// exp_f32's arithmetic), returning the max and the sum of the results.
MaxExpSum exp_minus_max(float* s, int64_t n);

// SwiGLU's product: out[i] = gate[i] / (1 + e^-gate[i]) * up[i] for i < n, with exp_f32's exp.
void silu_mul_f32(const float* gate, const float* up, float* out, int64_t n);

}  // namespace rlm::cpu
