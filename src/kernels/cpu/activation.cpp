#include "kernels/cpu/activation.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/vec_exp.h"

namespace rlm::cpu {
namespace {

// PyTorch's GeluType::Tanh in f32: kBeta = sqrt(2) * (2 / sqrt(pi)) * 0.5 = sqrt(2 / pi).
struct GeluTanh {
  float operator()(float g) const {
    constexpr float kBeta = 0.7978845608028654f, kKappa = 0.044715f;
    const float inner = kBeta * (g + kKappa * g * g * g);
    return 0.5f * g * (1.0f + std::tanh(inner));
  }
};

template <class Act>
void act_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo) {
  const Act act;
  parallel_for(n, std::max<int64_t>(1, 16384 / (inter + 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* gate = x + r * ldx;
      const float* up = gate + inter;
      float* o = out + r * ldo;
      for (int64_t j = 0; j < inter; ++j) o[j] = act(gate[j]) * up[j];
    }
  });
}

template <class F>
void map_rows(float* x, int64_t n, int64_t d, int64_t ld, const F& f) {
  parallel_for(n, std::max<int64_t>(1, 16384 / (d + 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = x + r * ld;
      for (int64_t j = 0; j < d; ++j) row[j] = f(row[j]);
    }
  });
}

}  // namespace

// g / (1 + e^-g) * up, vectorised (vec_exp.h's exp).
void silu_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo) {
  parallel_for(n, std::max<int64_t>(1, 16384 / (inter + 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      silu_mul_f32(x + r * ldx, x + r * ldx + inter, out + r * ldo, inter);
    }
  });
}

void gelu_tanh_and_mul(const float* x, int64_t n, int64_t inter, int64_t ldx, float* out, int64_t ldo) {
  act_and_mul<GeluTanh>(x, n, inter, ldx, out, ldo);
}

void scale_rows(float* x, int64_t n, int64_t d, int64_t ld, float s) {
  map_rows(x, n, d, ld, [s](float v) { return v * s; });
}

void soft_cap_rows(float* x, int64_t n, int64_t d, int64_t ld, float cap) {
  map_rows(x, n, d, ld, [cap](float v) { return cap * std::tanh(v / cap); });
}

}  // namespace rlm::cpu
