// CPU elementwise kernels of the Gated DeltaNet / gated-attention layers: the gated RMSNorm,
// the GDN gates (g, beta) and the sigmoid gates. All math in f32.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/rms_norm.h"

namespace rlm::cpu {

// out_row = (w * (x_row / sqrt(mean(x_row^2) + eps))) * silu(z_row); x, z, out share n0/n1 and d.
//   weight: [d] of weight_dtype. out may alias x.
void rms_norm_gated(const RowSet& x, const RowSet& z, const RowSet& out, int64_t d, const void* weight,
                    DType weight_dtype, float eps);

// g[t, h] = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h]); beta[t, h] = sigmoid(b[t, h]).
//   a, b, g, beta: [n, heads] with row strides lda, ldb, ldg, ldbeta; A_log, dt_bias: f32 [heads].
void gdn_gating(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t n, int64_t heads,
                const float* A_log, const float* dt_bias, float* g, int64_t ldg, float* beta, int64_t ldbeta);

// out = x * sigmoid(gate) over rows of d (out may alias x).
void sigmoid_mul(const RowSet& x, const RowSet& gate, const RowSet& out, int64_t d);

// out[i, :] += sigmoid(gate[i * ldgate]) * x[i, :].  x, out: [n, d] with row strides ldx, ldo.
void sigmoid_gate_add(const float* x, int64_t ldx, const float* gate, int64_t ldgate, int64_t n, int64_t d,
                      float* out, int64_t ldo);

}  // namespace rlm::cpu
