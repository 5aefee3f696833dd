#include "kernels/cpu/causal_conv1d.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace rlm::cpu {
namespace {

constexpr int64_t kChannelBlock = 32;  // channels per work item: rows are read 32 floats at a time

// Writes the window (oldest input first) of channels [c0, c0 + nc) into one state slot.
void store_window(const std::vector<float>& window, int64_t width, int64_t c0, int64_t nc, float* slot_state) {
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t j = 0; j < width; ++j) slot_state[(c0 + c) * width + j] = window[j * kChannelBlock + c];
  }
}

}  // namespace

void causal_conv1d(const float* x, int64_t ldx, int64_t conv_dim, const float* weight, const float* bias,
                   int64_t kernel_size, float* conv_state, const SegmentIndex& seg, bool silu, float* out,
                   int64_t ldo) {
  const int64_t width = kernel_size - 1;  // inputs kept in the state
  const int64_t blocks = (conv_dim + kChannelBlock - 1) / kChannelBlock;
  const int64_t slot_floats = conv_dim * width;
  parallel_for(seg.batch_size * blocks, 1, [&](int64_t begin, int64_t end) {
    // window[j * kChannelBlock + c]: input j of the kept ones (oldest first) of channel c0 + c.
    std::vector<float> window(static_cast<size_t>(std::max<int64_t>(width, 1) * kChannelBlock));
    std::vector<float> acc(kChannelBlock);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / blocks, c0 = (item % blocks) * kChannelBlock;
      const int64_t nc = std::min(kChannelBlock, conv_dim - c0);
      const int64_t len = seg.length(r);
      if (len == 0) continue;
      float* state = conv_state + seg.state_slots[r] * slot_floats;
      for (int64_t c = 0; c < nc; ++c) {
        for (int64_t j = 0; j < width; ++j) {
          window[j * kChannelBlock + c] = seg.has_initial_state[r] != 0 ? state[(c0 + c) * width + j] : 0.0f;
        }
      }
      const int64_t track = seg.track_len(r);
      for (int64_t t = 0; t < len; ++t) {
        const int64_t row = seg.begin(r) + t;
        const float* xr = x + row * ldx + c0;
        for (int64_t c = 0; c < nc; ++c) {
          const float* w = weight + (c0 + c) * kernel_size;
          float s = bias != nullptr ? bias[c0 + c] : 0.0f;
          for (int64_t j = 0; j < width; ++j) s += w[j] * window[j * kChannelBlock + c];
          acc[c] = s + w[width] * xr[c];
        }
        // Shift the window by one input (read x before out overwrites it when in place).
        for (int64_t j = 0; j + 1 < width; ++j) {
          for (int64_t c = 0; c < nc; ++c) window[j * kChannelBlock + c] = window[(j + 1) * kChannelBlock + c];
        }
        if (width > 0) {
          for (int64_t c = 0; c < nc; ++c) window[(width - 1) * kChannelBlock + c] = xr[c];
        }
        float* o = out + row * ldo + c0;
        for (int64_t c = 0; c < nc; ++c) o[c] = silu ? acc[c] / (1.0f + std::exp(-acc[c])) : acc[c];
        if (t + 1 == track) store_window(window, width, c0, nc, conv_state + seg.track_slots[r] * slot_floats);
      }
      store_window(window, width, c0, nc, state);
    }
  });
}

}  // namespace rlm::cpu
