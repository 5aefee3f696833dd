// CUDA gated delta rule, chunk by chunk (twin of the chunked path of
// kernels/cpu/gated_delta_rule.cpp, the WY/UT form of HF's torch_chunk_gated_delta_rule). One
// block of kThreads per (request, value head); the f32 [head_k_dim, head_v_dim] state and one chunk
// of q, k, v, w and a [chunk, chunk] matrix live in dynamic shared memory (about 210 KiB at 128/128).
// Per chunk of n <= 64 tokens, with gc = the cumulative log-decay within the chunk and S the state
// before the chunk:
//   L[i][j] = beta_i exp(gc_i - gc_j) k_i.k_j (j < i);  (I + L) u = beta v,  (I + L) w = beta exp(gc) k
//   (forward substitution, one thread per column of u or w, no barriers);
//   the products below in register tiles (8 x 4 or 16 x 4 outputs per thread);
//   v'_i = u_i - w_i^T S;  out_i = exp(gc_i) q_i^T S + sum_{j <= i} exp(gc_i - gc_j) (q_i.k_j) v'_j;
//   S <- exp(gc_last) S + sum_j exp(gc_last - gc_j) k_j v'_j^T.
// Chunks of one request run in order; a tracked request is split at track_lens (the snapshot is the
// state after exactly that many tokens), as on the CPU.
#include <algorithm>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_facts.h"
#include "kernels/cuda/gated_delta_rule_chunked.h"

namespace rlm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumns = 128;  // threads [0, 128) own u columns, [128, 256) w columns
constexpr int kMaxDim = static_cast<int>(kMaxGdrHeadDim);
constexpr float kL2NormEps = 1e-6f;
static_assert(kThreads == 2 * kColumns && kColumns >= kMaxDim, "one thread per u and per w column");
// Register tiles of the three chunk products: warp w, lane l owns rows w + 8 a and columns l + 32 b.
constexpr int kWarps = kThreads / 32;
constexpr int kColTiles = kMaxDim / 32;                                // columns e < 128
constexpr int kRowTiles = static_cast<int>(kGdrChunk) / kWarps;        // chunk rows i < 64
constexpr int kStateRowTiles = kMaxDim / kWarps;                       // state rows d < 128
static_assert(kColTiles * 32 == kMaxDim && kRowTiles * kWarps == kGdrChunk && kStateRowTiles * kWarps == kMaxDim,
              "tiles cover the chunk and the head dims");

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Row stride of the [chunk][dk] arrays: odd, so that threads reading rows j, j + 1, ... of K at
// one d hit distinct banks.
__host__ __device__ constexpr int padded(int dk) { return dk | 1; }

// Shared floats for head dims (dk, dv): S, Q, K, W, V(u, v'), A, gc, exp(gc), exp(gc_last - gc), beta.
int64_t shared_floats(int64_t dk, int64_t dv) {
  const int64_t c = kGdrChunk;
  return dk * dv + 3 * c * padded(static_cast<int>(dk)) + c * dv + c * c + 4 * c;
}

__global__ void __launch_bounds__(kThreads) gdr_chunk_kernel(GdrArgs in, float* ssm_state, DeviceSegments s,
                                                             int chunk, float* out) {
  extern __shared__ float smem[];
  constexpr int C = static_cast<int>(kGdrChunk);
  const int dk = static_cast<int>(in.head_k_dim), dv = static_cast<int>(in.head_v_dim), ldk = padded(dk);
  const int64_t hv = in.num_v_heads;
  const int64_t r = blockIdx.x / hv, h = blockIdx.x % hv;
  const int64_t kh = h / (hv / in.num_k_heads);
  const int64_t begin = s.qo_indptr[r], len = s.qo_indptr[r + 1] - begin;
  if (len == 0) return;  // uniform over the block

  float* S = smem;           // [dk][dv]
  float* Q = S + dk * dv;    // [C][dk] (row stride ldk)
  float* K = Q + C * ldk;    // [C][dk] (row stride ldk)
  float* W = K + C * ldk;    // [C][dk] (row stride ldk)
  float* V = W + C * ldk;    // [C][dv]: v, then u, then v'
  float* A = V + C * dv;     // [C][C]: L, then the decayed q.k
  float* gc = A + C * C;     // [C]
  float* egc = gc + C;       // [C] exp(gc_i)
  float* dl = egc + C;       // [C] exp(gc_last - gc_j)
  float* bt = dl + C;        // [C]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t head_floats = static_cast<int64_t>(dk) * dv;
  float* slot = ssm_state + (static_cast<int64_t>(s.state_slots[r]) * hv + h) * head_floats;
  const int64_t track = s.track_slots != nullptr && s.track_slots[r] >= 0 ? s.track_lens[r] : -1;
  const bool has_init = s.has_initial_state[r] != 0;
  for (int64_t i = tid; i < head_floats; i += kThreads) S[i] = has_init ? slot[i] : 0.0f;

  for (int64_t pos0 = 0; pos0 < len;) {
    const int64_t seg_end = track > pos0 ? track : len;
    const int n = seg_end - pos0 < chunk ? static_cast<int>(seg_end - pos0) : chunk;
    __syncthreads();  // S is initialised / the previous chunk is no longer read
    for (int idx = tid; idx < n * dk; idx += kThreads) {
      const int t = idx / dk, d = idx % dk;
      const int64_t row = begin + pos0 + t;
      Q[t * ldk + d] = in.q[row * in.q_st + kh * in.q_sh + d];
      K[t * ldk + d] = in.k[row * in.k_st + kh * in.k_sh + d];
    }
    for (int idx = tid; idx < n * dv; idx += kThreads) {
      const int t = idx / dv, e = idx % dv;
      V[idx] = in.v[(begin + pos0 + t) * in.v_st + h * in.v_sh + e];
    }
    if (tid < n) {
      const int64_t row = begin + pos0 + tid;
      gc[tid] = in.g[row * in.ldg + h];
      bt[tid] = in.beta[row * in.ldbeta + h];
    }
    __syncthreads();
    // q <- (q / sqrt(sum q^2 + eps)) * scale, k <- k / sqrt(sum k^2 + eps); one warp per (token, q|k).
    for (int job = warp; job < 2 * n; job += kThreads / 32) {
      float* vec = (job % 2 == 0 ? Q : K) + (job / 2) * ldk;
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
    if (tid == 0) {
      for (int t = 1; t < n; ++t) gc[t] += gc[t - 1];
    }
    __syncthreads();
    if (tid < n) {
      egc[tid] = expf(gc[tid]);
      dl[tid] = expf(gc[n - 1] - gc[tid]);
    }
    for (int idx = tid; idx < n * n; idx += kThreads) {
      const int i = idx / n, j = idx % n;
      if (j >= i) continue;
      float dot = 0.0f;
      for (int d = 0; d < dk; ++d) dot += K[i * ldk + d] * K[j * ldk + d];
      A[i * C + j] = bt[i] * expf(gc[i] - gc[j]) * dot;
    }
    __syncthreads();
    // Forward substitution (I + L) u = beta v in V, (I + L) w = beta exp(gc) k in W: each thread
    // owns one column, rows in order.
    if (tid < kColumns) {
      const int e = tid;
      if (e < dv) {
        for (int i = 0; i < n; ++i) {
          float acc = bt[i] * V[i * dv + e];
          for (int j = 0; j < i; ++j) acc -= A[i * C + j] * V[j * dv + e];
          V[i * dv + e] = acc;
        }
      }
    } else {
      const int d = tid - kColumns;
      if (d < dk) {
        for (int i = 0; i < n; ++i) {
          float acc = bt[i] * egc[i] * K[i * ldk + d];
          for (int j = 0; j < i; ++j) acc -= A[i * C + j] * W[j * ldk + d];
          W[i * ldk + d] = acc;
        }
      }
    }
    __syncthreads();
    // v'_i = u_i - w_i^T S (in place: each thread reads only its own elements of V); A <- decayed q.k.
    {
      float acc[kRowTiles][kColTiles] = {};
      for (int d = 0; d < dk; ++d) {
        float wa[kRowTiles], sb[kColTiles];
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
          const int i = warp + kWarps * a;
          wa[a] = i < n ? W[i * ldk + d] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          sb[b] = e < dv ? S[d * dv + e] : 0.0f;
        }
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
          for (int b = 0; b < kColTiles; ++b) acc[a][b] += wa[a] * sb[b];
        }
      }
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
        const int i = warp + kWarps * a;
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          if (i < n && e < dv) V[i * dv + e] -= acc[a][b];
        }
      }
    }
    for (int idx = tid; idx < n * n; idx += kThreads) {
      const int i = idx / n, j = idx % n;
      if (j > i) continue;
      float dot = 0.0f;
      for (int d = 0; d < dk; ++d) dot += Q[i * ldk + d] * K[j * ldk + d];
      A[i * C + j] = expf(gc[i] - gc[j]) * dot;
    }
    __syncthreads();
    // out_i = exp(gc_i) q_i^T S + sum_{j <= i} A[i][j] v'_j; same tiling as v'.
    {
      float acc[kRowTiles][kColTiles] = {};
      for (int d = 0; d < dk; ++d) {
        float qa[kRowTiles], sb[kColTiles];
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
          const int i = warp + kWarps * a;
          qa[a] = i < n ? Q[i * ldk + d] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          sb[b] = e < dv ? S[d * dv + e] : 0.0f;
        }
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
          for (int b = 0; b < kColTiles; ++b) acc[a][b] += qa[a] * sb[b];
        }
      }
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
        const int i = warp + kWarps * a;
        const float f = i < n ? egc[i] : 0.0f;
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) acc[a][b] *= f;
      }
      for (int j = 0; j < n; ++j) {
        float aa[kRowTiles], vb[kColTiles];
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
          const int i = warp + kWarps * a;
          aa[a] = i < n && j <= i ? A[i * C + j] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          vb[b] = e < dv ? V[j * dv + e] : 0.0f;
        }
#pragma unroll
        for (int a = 0; a < kRowTiles; ++a) {
#pragma unroll
          for (int b = 0; b < kColTiles; ++b) acc[a][b] += aa[a] * vb[b];
        }
      }
#pragma unroll
      for (int a = 0; a < kRowTiles; ++a) {
        const int i = warp + kWarps * a;
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          if (i < n && e < dv) out[((begin + pos0 + i) * hv + h) * dv + e] = acc[a][b];
        }
      }
    }
    __syncthreads();  // S is no longer read for the outputs
    const float last = egc[n - 1];
    // S <- exp(gc_last) S + sum_j (k_j exp(gc_last - gc_j)) v'_j^T: thread owns rows
    // d = warp + 8 a (a < 16), columns e = lane + 32 b (b < 4), and only reads its own S.
    {
      float acc[kStateRowTiles][kColTiles] = {};
      for (int j = 0; j < n; ++j) {
        float ka[kStateRowTiles], vb[kColTiles];
        const float f = dl[j];
#pragma unroll
        for (int a = 0; a < kStateRowTiles; ++a) {
          const int d = warp + kWarps * a;
          ka[a] = d < dk ? K[j * ldk + d] * f : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          vb[b] = e < dv ? V[j * dv + e] : 0.0f;
        }
#pragma unroll
        for (int a = 0; a < kStateRowTiles; ++a) {
#pragma unroll
          for (int b = 0; b < kColTiles; ++b) acc[a][b] += ka[a] * vb[b];
        }
      }
#pragma unroll
      for (int a = 0; a < kStateRowTiles; ++a) {
        const int d = warp + kWarps * a;
#pragma unroll
        for (int b = 0; b < kColTiles; ++b) {
          const int e = lane + 32 * b;
          if (d < dk && e < dv) S[d * dv + e] = last * S[d * dv + e] + acc[a][b];
        }
      }
    }
    pos0 += n;
    if (pos0 == track) {
      __syncthreads();
      float* snap = ssm_state + (static_cast<int64_t>(s.track_slots[r]) * hv + h) * head_floats;
      for (int64_t idx = tid; idx < head_floats; idx += kThreads) snap[idx] = S[idx];
    }
  }
  __syncthreads();
  for (int64_t idx = tid; idx < head_floats; idx += kThreads) slot[idx] = S[idx];
}

}  // namespace

int64_t gated_delta_rule_chunked_smem_bytes(int64_t head_k_dim, int64_t head_v_dim) {
  return shared_floats(head_k_dim, head_v_dim) * static_cast<int64_t>(sizeof(float));
}

void gated_delta_rule_chunked(int device, const GdrArgs& in, float* ssm_state, const DeviceSegments& seg,
                              int64_t chunk_size, float* out) {
  RLM_CHECK(in.head_k_dim >= 1 && in.head_k_dim <= kMaxGdrHeadDim && in.head_v_dim >= 1 &&
            in.head_v_dim <= kMaxGdrHeadDim)
      << "gated_delta_rule_chunked: head dims " << in.head_k_dim << ", " << in.head_v_dim << " (at most "
      << kMaxGdrHeadDim << ")";
  RLM_CHECK(in.num_k_heads > 0 && in.num_v_heads % in.num_k_heads == 0) << "gated_delta_rule_chunked: heads";
  RLM_CHECK(chunk_size >= 1) << "gated_delta_rule_chunked: chunk_size " << chunk_size;
  const int chunk = static_cast<int>(std::min<int64_t>(chunk_size, kGdrChunk));
  const int64_t blocks = seg.batch_size * in.num_v_heads;
  if (blocks == 0) return;
  RLM_CHECK(blocks <= 0x7fffffff) << "gated_delta_rule_chunked: " << blocks << " blocks";
  const int64_t smem = gated_delta_rule_chunked_smem_bytes(in.head_k_dim, in.head_v_dim);
  const int max_optin = shared_memory_optin(device);
  RLM_CHECK(smem <= max_optin) << "gated_delta_rule_chunked: needs " << smem << " bytes of shared memory, device "
                               << device << " allows " << max_optin;
  RLM_CUDA_CHECK(cudaFuncSetAttribute(gdr_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem)));
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  gdr_chunk_kernel<<<static_cast<unsigned>(blocks), kThreads, static_cast<size_t>(smem), stream>>>(
      in, ssm_state, seg, chunk, out);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
