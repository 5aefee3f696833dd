// CUDA gated delta rule, token by token (twin of the recurrent path of
// kernels/cpu/gated_delta_rule.cpp). One block per (request, value head); the [head_k_dim,
// head_v_dim] state lives in registers: thread (warp w, lane l) owns column e = 8w + (l & 7) and
// the rows d = 4i + (l >> 3), i < 32, so the sums over d are a per-thread loop plus two shuffles.
// Tokens are staged kTokens at a time in shared memory (q, k L2-normalised there), after which the
// token loop runs without block barriers.
#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/linear_attention.h"

namespace rlm::cuda {
namespace {

constexpr int kParts = 4;                                    // lanes sharing one column e
constexpr int kMaxDim = static_cast<int>(kMaxGdrHeadDim);    // 128
constexpr int kPerThread = kMaxDim / kParts;                 // state rows per thread
constexpr int kTokens = 16;                                  // tokens staged per shared-memory load
constexpr float kL2NormEps = 1e-6f;

__device__ __forceinline__ float sum_parts(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  v += __shfl_xor_sync(0xffffffffu, v, 16);
  return v;
}

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void __launch_bounds__(512) gdr_kernel(GdrArgs in, float* ssm_state, DeviceSegments s, float* out) {
  __shared__ float qs[kTokens][kMaxDim];
  __shared__ float ks[kTokens][kMaxDim];
  __shared__ float vs[kTokens][kMaxDim];
  __shared__ float decay_s[kTokens];
  __shared__ float beta_s[kTokens];

  const int64_t hv = in.num_v_heads, dk = in.head_k_dim, dv = in.head_v_dim;
  const int64_t r = blockIdx.x / hv, h = blockIdx.x % hv;
  const int64_t kh = h / (hv / in.num_k_heads);
  const int64_t begin = s.qo_indptr[r], len = s.qo_indptr[r + 1] - begin;
  if (len == 0) return;  // uniform over the block

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  const int part = lane >> 3;
  const int64_t e = static_cast<int64_t>(warp) * 8 + (lane & 7);
  const bool has_e = e < dv;
  const int64_t head_floats = dk * dv;
  float* slot = ssm_state + (static_cast<int64_t>(s.state_slots[r]) * hv + h) * head_floats;
  const int64_t track = s.track_slots != nullptr && s.track_slots[r] >= 0 ? s.track_lens[r] : -1;

  float st[kPerThread];
  const bool has_init = s.has_initial_state[r] != 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t d = static_cast<int64_t>(i) * kParts + part;
    st[i] = has_e && d < dk && has_init ? slot[d * dv + e] : 0.0f;
  }
  auto store = [&](float* dst) {
    if (!has_e) return;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int64_t d = static_cast<int64_t>(i) * kParts + part;
      if (d < dk) dst[d * dv + e] = st[i];
    }
  };

  for (int64_t pos0 = 0; pos0 < len; pos0 += kTokens) {
    const int nt = static_cast<int>(len - pos0 < kTokens ? len - pos0 : kTokens);
    __syncthreads();  // the previous tokens are no longer read
    for (int idx = threadIdx.x; idx < kTokens * kMaxDim; idx += blockDim.x) {
      const int t = idx / kMaxDim, d = idx % kMaxDim;
      const int64_t row = begin + pos0 + t;
      const bool ok = t < nt;
      qs[t][d] = ok && d < dk ? in.q[row * in.q_st + kh * in.q_sh + d] : 0.0f;
      ks[t][d] = ok && d < dk ? in.k[row * in.k_st + kh * in.k_sh + d] : 0.0f;
      vs[t][d] = ok && d < dv ? in.v[row * in.v_st + h * in.v_sh + d] : 0.0f;
    }
    if (threadIdx.x < kTokens) {
      const int t = threadIdx.x;
      const int64_t row = begin + pos0 + t;
      decay_s[t] = t < nt ? expf(in.g[row * in.ldg + h]) : 1.0f;
      beta_s[t] = t < nt ? in.beta[row * in.ldbeta + h] : 0.0f;
    }
    __syncthreads();
    // q <- (q / sqrt(sum q^2 + eps)) * scale, k <- k / sqrt(sum k^2 + eps); one warp per (token, q|k).
    for (int job = warp; job < 2 * nt; job += num_warps) {
      float* vec = job % 2 == 0 ? qs[job / 2] : ks[job / 2];
      const float mult = job % 2 == 0 ? in.scale : 1.0f;
      float inv = 1.0f;
      if (in.l2norm) {
        double sum = 0.0;
        for (int d = lane; d < dk; d += 32) sum += static_cast<double>(vec[d]) * vec[d];
        sum = warp_sum_double(sum);
        inv = 1.0f / sqrtf(static_cast<float>(sum) + kL2NormEps);
      }
      for (int d = lane; d < dk; d += 32) vec[d] = (vec[d] * inv) * mult;
    }
    __syncthreads();
    for (int t = 0; t < nt; ++t) {
      const float decay = decay_s[t];
      float kv = 0.0f;  // (S^T k)[e], this thread's rows
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        st[i] *= decay;
        kv += st[i] * ks[t][i * kParts + part];
      }
      kv = sum_parts(kv);
      const float delta = (vs[t][has_e ? e : 0] - kv) * beta_s[t];
      float o = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        st[i] += ks[t][i * kParts + part] * delta;
        o += st[i] * qs[t][i * kParts + part];
      }
      o = sum_parts(o);
      const int64_t row = begin + pos0 + t;
      if (has_e && part == 0) out[(row * hv + h) * dv + e] = o;
      if (pos0 + t + 1 == track) store(ssm_state + (static_cast<int64_t>(s.track_slots[r]) * hv + h) * head_floats);
    }
  }
  store(slot);
}

}  // namespace

void gated_delta_rule(int device, const GdrArgs& in, float* ssm_state, const DeviceSegments& seg, float* out) {
  RLM_CHECK(in.head_k_dim >= 1 && in.head_k_dim <= kMaxGdrHeadDim && in.head_v_dim >= 1 &&
            in.head_v_dim <= kMaxGdrHeadDim)
      << "gated_delta_rule: head dims " << in.head_k_dim << ", " << in.head_v_dim << " (at most " << kMaxGdrHeadDim
      << ")";
  RLM_CHECK(in.num_k_heads > 0 && in.num_v_heads % in.num_k_heads == 0) << "gated_delta_rule: heads";
  const int64_t blocks = seg.batch_size * in.num_v_heads;
  if (blocks == 0) return;
  RLM_CHECK(blocks <= 0x7fffffff) << "gated_delta_rule: " << blocks << " blocks";
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const int threads = static_cast<int>((in.head_v_dim + 7) / 8) * 32;
  gdr_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(in, ssm_state, seg, out);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
