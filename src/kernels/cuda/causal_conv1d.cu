// CUDA depthwise causal conv1d with rolling state (twin of kernels/cpu/causal_conv1d.cpp) and the
// validation of device-resident StateSegments shared by the recurrent-state ops.
#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"
#include "kernels/cuda/linear_attention.h"

namespace rlm::cuda {
namespace {

// Error codes of check_segments_kernel (the flag holds claim * 16 + code; the lowest wins, which
// is the first error in the CPU checker's order: request by request, state slot then track slot).
enum SegmentError : int {
  kIndptrStart = 1,
  kIndptrEnd = 2,
  kIndptrDecreases = 3,
  kStateSlotRange = 4,
  kStateSlotTwice = 5,
  kTrackSlotRange = 6,
  kTrackSlotTwice = 7,
  kTrackLen = 8,
  kTrackSlotNegative = 9,
};

// Claim c of the call: even c = 2r is request r's state slot, odd c = 2r + 1 its track slot
// (or -1 when it takes no snapshot).
__device__ __forceinline__ int32_t claimed_slot(const DeviceSegments& s, int64_t c) {
  const int64_t r = c / 2;
  if (c % 2 == 0) return s.state_slots[r];
  if (s.track_slots == nullptr || s.track_slots[r] < 0) return -1;
  return s.track_slots[r];
}

__global__ void check_segments_kernel(DeviceSegments s, int64_t num_tokens, int64_t num_slots,
                                      unsigned long long* first_bad) {
  const int64_t bs = s.batch_size;
  auto report = [&](int64_t claim, int code) {
    atomicMin(first_bad, static_cast<unsigned long long>(claim) * 16ull + static_cast<unsigned long long>(code));
  };
  for (int64_t c = threadIdx.x; c < 2 * bs + 1; c += blockDim.x) {
    const int64_t r = c / 2;
    if (c == 2 * bs) {  // the end of qo_indptr, checked after every request
      if (s.qo_indptr[bs] != num_tokens) report(c, kIndptrEnd);
      continue;
    }
    if (c == 0 && s.qo_indptr[0] != 0) report(c, kIndptrStart);
    const int64_t len = static_cast<int64_t>(s.qo_indptr[r + 1]) - s.qo_indptr[r];
    if (c % 2 == 0) {
      if (len < 0) {
        report(c, kIndptrDecreases);
        continue;
      }
      const int32_t slot = s.state_slots[r];
      if (slot < 0 || slot >= num_slots) {
        report(c, kStateSlotRange);
        continue;
      }
    } else {
      if (s.track_slots == nullptr) continue;
      const int32_t t = s.track_slots[r];
      if (t < -1) {
        report(c, kTrackSlotNegative);
        continue;
      }
      if (t == -1) continue;
      if (t >= num_slots) {
        report(c, kTrackSlotRange);
        continue;
      }
      if (s.track_lens[r] < 1 || s.track_lens[r] > len) report(c, kTrackLen);
    }
    const int32_t slot = claimed_slot(s, c);
    for (int64_t o = 0; o < c; ++o) {
      if (claimed_slot(s, o) == slot) {
        report(c, c % 2 == 0 ? kStateSlotTwice : kTrackSlotTwice);
        break;
      }
    }
  }
}

// Largest r with qo_indptr[r] <= row (the request that owns token row `row`).
__device__ __forceinline__ int64_t request_of(const int32_t* indptr, int64_t batch_size, int64_t row) {
  int64_t lo = 0, hi = batch_size - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (indptr[mid] <= row) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Input m of request r's conv sequence in[] (the state's width older inputs, then its new rows).
__device__ __forceinline__ float conv_input(const float* x, int64_t ldx, int64_t begin, int64_t m, int64_t width,
                                            const float* old_state, bool has_init, int64_t c) {
  if (m >= width) return x[(begin + m - width) * ldx + c];
  return has_init ? old_state[c * width + m] : 0.0f;
}

// One thread per (token row, channel): every output depends only on x and the old state, so the
// rows are independent (x must not alias out: the host copies x aside for in-place calls).
template <typename W, typename B>
__global__ void conv_out_kernel(const float* x, int64_t ldx, int64_t n, int64_t conv_dim, const W* weight,
                                const B* bias, int64_t kernel_size, const float* conv_state, DeviceSegments s,
                                bool silu, float* out, int64_t ldo) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= conv_dim) return;
  const int64_t width = kernel_size - 1;
  for (int64_t row = blockIdx.y; row < n; row += gridDim.y) {
    const int64_t r = request_of(s.qo_indptr, s.batch_size, row);
    const int64_t begin = s.qo_indptr[r], i = row - begin;
    const bool has_init = s.has_initial_state[r] != 0;
    const float* old_state = conv_state + static_cast<int64_t>(s.state_slots[r]) * conv_dim * width;
    float acc = bias != nullptr ? to_float(bias[c]) : 0.0f;
    for (int64_t j = 0; j < kernel_size; ++j) {
      acc += to_float(weight[c * kernel_size + j]) * conv_input(x, ldx, begin, i + j, width, old_state, has_init, c);
    }
    out[row * ldo + c] = silu ? acc / (1.0f + expf(-acc)) : acc;
  }
}

// One thread per (request, channel): the snapshot (the last width inputs up to track_lens[r]) and
// then the new state (the last width inputs). Reads of the old state come before any write of
// the same slot (the snapshot goes to another slot; for the state, input index len + j >= j).
__global__ void conv_state_kernel(const float* x, int64_t ldx, int64_t conv_dim, int64_t width, float* conv_state,
                                  DeviceSegments s) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t r = blockIdx.y;
  if (c >= conv_dim) return;
  const int64_t begin = s.qo_indptr[r], len = s.qo_indptr[r + 1] - begin;
  if (len == 0) return;
  const bool has_init = s.has_initial_state[r] != 0;
  float* state = conv_state + static_cast<int64_t>(s.state_slots[r]) * conv_dim * width;
  if (s.track_slots != nullptr && s.track_slots[r] >= 0) {
    const int64_t track = s.track_lens[r];
    float* snap = conv_state + static_cast<int64_t>(s.track_slots[r]) * conv_dim * width;
    for (int64_t j = 0; j < width; ++j) snap[c * width + j] = conv_input(x, ldx, begin, track + j, width, state, has_init, c);
  }
  for (int64_t j = 0; j < width; ++j) state[c * width + j] = conv_input(x, ldx, begin, len + j, width, state, has_init, c);
}

// One i32 of device memory (error path only).
int32_t read_i32(const int32_t* p, int64_t i) {
  int32_t v = 0;
  RLM_CUDA_CHECK(cudaMemcpy(&v, p + i, sizeof(v), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace

std::string check_segments(int device, const DeviceSegments& seg, int64_t num_tokens, int64_t num_slots) {
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();
  auto* flag = static_cast<unsigned long long*>(ctx.flag_buffer());
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  RLM_CUDA_CHECK(cudaMemsetAsync(flag, 0xFF, sizeof(unsigned long long), stream));
  check_segments_kernel<<<1, kBlock, 0, stream>>>(seg, num_tokens, num_slots, flag);
  RLM_CUDA_CHECK_LAUNCH();
  unsigned long long first = 0;
  RLM_CUDA_CHECK(cudaMemcpyAsync(&first, flag, sizeof(first), cudaMemcpyDeviceToHost, stream));
  RLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (first == ~0ull) return "";
  // The messages of the CPU checker (ops/linear_attention_ops.cpp), values read back.
  const int64_t claim = static_cast<int64_t>(first / 16), r = claim / 2, bs = seg.batch_size;
  auto len = [&] { return static_cast<int64_t>(read_i32(seg.qo_indptr, r + 1)) - read_i32(seg.qo_indptr, r); };
  switch (static_cast<int>(first % 16)) {
    case kIndptrStart: return str("segments.qo_indptr[0] must be 0, got ", read_i32(seg.qo_indptr, 0));
    case kIndptrEnd:
      return str("segments.qo_indptr[", bs, "] = ", read_i32(seg.qo_indptr, bs), " must equal num_tokens = ",
                 num_tokens);
    case kIndptrDecreases: return str("segments.qo_indptr decreases at request ", r);
    case kStateSlotRange:
      return str("state slot ", read_i32(seg.state_slots, r), " of request ", r, " is outside the state pool [0, ",
                 num_slots, ")");
    case kStateSlotTwice:
      return str("state slot ", read_i32(seg.state_slots, r), " of request ", r, " is used twice in one call");
    case kTrackSlotRange:
      return str("track slot ", read_i32(seg.track_slots, r), " of request ", r, " is outside the state pool [0, ",
                 num_slots, ")");
    case kTrackSlotTwice:
      return str("track slot ", read_i32(seg.track_slots, r), " of request ", r, " is used twice in one call");
    case kTrackLen:
      return str("track length ", read_i32(seg.track_lens, r), " of request ", r, " must be in [1, ", len(),
                 "] (its new tokens)");
    case kTrackSlotNegative:
      return str("track slot ", read_i32(seg.track_slots, r), " of request ", r, " must be -1 (none) or a slot");
    default: return str("segments: unknown check result ", first);
  }
}

void causal_conv1d(int device, const float* x, int64_t ldx, int64_t num_tokens, int64_t conv_dim,
                   const void* weight, DType w_dtype, const void* bias, DType b_dtype, int64_t kernel_size,
                   float* conv_state, const DeviceSegments& seg, bool silu, float* out, int64_t ldo) {
  RLM_CHECK(kernel_size >= 1) << "causal_conv1d: kernel_size " << kernel_size;
  if (seg.batch_size == 0 || conv_dim == 0) return;
  CudaContext& ctx = CudaContext::get(device);
  auto lock = ctx.lock();
  const auto stream = static_cast<cudaStream_t>(ctx.stream());
  const float* src = x;
  int64_t ld_src = ldx;
  if (x == out && num_tokens > 0) {  // in place: read a copy, since rows are computed in parallel
    float* copy = static_cast<float*>(ctx.scratch(static_cast<size_t>(num_tokens * conv_dim) * sizeof(float)));
    RLM_CUDA_CHECK(cudaMemcpy2DAsync(copy, conv_dim * sizeof(float), x, ldx * sizeof(float), conv_dim * sizeof(float),
                                     num_tokens, cudaMemcpyDeviceToDevice, stream));
    src = copy;
    ld_src = conv_dim;
  }
  constexpr int kThreads = 128;
  const unsigned channel_blocks = static_cast<unsigned>((conv_dim + kThreads - 1) / kThreads);
  if (num_tokens > 0) {
    const dim3 grid(channel_blocks, static_cast<unsigned>(num_tokens < 65535 ? num_tokens : 65535));
    dispatch_float(w_dtype, [&](auto w) {
      using W = decltype(w);
      dispatch_float(bias != nullptr ? b_dtype : DType::kF32, [&](auto b) {
        using B = decltype(b);
        conv_out_kernel<W, B><<<grid, kThreads, 0, stream>>>(src, ld_src, num_tokens, conv_dim,
                                                             static_cast<const W*>(weight), static_cast<const B*>(bias),
                                                             kernel_size, conv_state, seg, silu, out, ldo);
        RLM_CUDA_CHECK_LAUNCH();
      });
    });
  }
  RLM_CHECK(seg.batch_size <= 65535) << "causal_conv1d: batch of " << seg.batch_size << " requests";
  if (kernel_size > 1) {
    const dim3 grid(channel_blocks, static_cast<unsigned>(seg.batch_size));
    conv_state_kernel<<<grid, kThreads, 0, stream>>>(src, ld_src, conv_dim, kernel_size - 1, conv_state, seg);
    RLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace rlm::cuda
