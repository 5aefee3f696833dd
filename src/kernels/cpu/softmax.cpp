#include "kernels/cpu/softmax.h"

#include <cmath>
#include <limits>

namespace rlm::cpu {

float max_row(const float* x, int64_t v) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < v; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

int64_t argmax_row(const float* x, int64_t v) {
  int64_t best = -1;
  for (int64_t j = 0; j < v; ++j) {
    if (std::isnan(x[j])) continue;
    if (best < 0 || x[j] > x[best]) best = j;
  }
  return best < 0 ? 0 : best;
}

void softmax(float* x, int64_t n, int64_t v, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = x + i * ld;
    const float m = max_row(row, v);
    double sum = 0.0;
    for (int64_t j = 0; j < v; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < v; ++j) row[j] *= inv;
  }
}

void log_softmax(float* x, int64_t n, int64_t v, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = x + i * ld;
    const float m = max_row(row, v);
    double sum = 0.0;
    for (int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - m);
    const float log_sum = static_cast<float>(std::log(sum));
    for (int64_t j = 0; j < v; ++j) row[j] = (row[j] - m) - log_sum;
  }
}

void argmax(const float* x, int64_t n, int64_t v, int64_t ld, int32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(argmax_row(x + i * ld, v));
}

}  // namespace rlm::cpu
