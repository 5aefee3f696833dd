#include "kernels/cpu/rotary.h"

#include <cmath>
#include <numbers>

#include "core/check.h"

namespace rlm::cpu {

std::vector<float> rope_inv_freq(int64_t rotary_dim, double theta, const std::string& scaling_type,
                                 double factor, double low_freq_factor, double high_freq_factor,
                                 int64_t original_max_position) {
  RLM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0) << "rope: rotary_dim must be positive and even, got " << rotary_dim;
  const int64_t half = rotary_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[i] = 1.0f / std::pow(base, exponent);
  }
  if (scaling_type.empty() || scaling_type == "default") return inv;
  if (scaling_type == "linear") {
    RLM_CHECK(factor > 0) << "rope: linear scaling needs factor > 0, got " << factor;
    for (float& f : inv) f = f / static_cast<float>(factor);
    return inv;
  }
  if (scaling_type == "llama3") {
    RLM_CHECK(factor > 0 && high_freq_factor != low_freq_factor && original_max_position > 0)
        << "rope: bad llama3 parameters (factor " << factor << ", low_freq_factor " << low_freq_factor
        << ", high_freq_factor " << high_freq_factor << ", original_max_position " << original_max_position << ")";
    const float fac = static_cast<float>(factor);
    const float old_len = static_cast<float>(original_max_position);
    const float low_wavelen = static_cast<float>(static_cast<double>(original_max_position) / low_freq_factor);
    const float high_wavelen = static_cast<float>(static_cast<double>(original_max_position) / high_freq_factor);
    const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
    const float lff = static_cast<float>(low_freq_factor);
    const float dff = static_cast<float>(high_freq_factor - low_freq_factor);
    for (float& f : inv) {
      // torch evaluates `scalar / tensor` as reciprocal(tensor) * scalar.
      const float wavelen = (1.0f / f) * two_pi;
      const float scaled = wavelen > low_wavelen ? f / fac : f;
      const float smooth = ((1.0f / wavelen) * old_len - lff) / dff;
      const float smoothed = (1.0f - smooth) * scaled / fac + smooth * scaled;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
    return inv;
  }
  fail(str("rope: unsupported rope scaling type '", scaling_type, "' (supported: default, linear, llama3)"));
}

void rope_cos_sin(const std::vector<float>& inv_freq, int64_t max_positions, float* cos_sin) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    float* row = cos_sin + p * 2 * half;
    const float pos = static_cast<float>(p);
    for (int64_t i = 0; i < half; ++i) {
      const float freq = pos * inv_freq[i];
      row[i] = std::cos(freq);
      row[half + i] = std::sin(freq);
    }
  }
}

namespace {

void rotate_head(float* x, const float* cos, const float* sin, int64_t half, bool is_neox) {
  if (is_neox) {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[i], x2 = x[i + half];
      x[i] = x1 * cos[i] - x2 * sin[i];
      x[i + half] = x2 * cos[i] + x1 * sin[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[2 * i], x2 = x[2 * i + 1];
      x[2 * i] = x1 * cos[i] - x2 * sin[i];
      x[2 * i + 1] = x2 * cos[i] + x1 * sin[i];
    }
  }
}

}  // namespace

void rotary_embedding(const HeadSet& q, const HeadSet& k, int64_t num_tokens, const int64_t* positions,
                      const float* cos_sin, int64_t max_positions, int64_t rotary_dim, bool is_neox) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (positions[t] < 0 || positions[t] >= max_positions) {
      fail(str("rotary_embedding: position ", positions[t], " of token ", t, " is outside the cos/sin cache [0, ",
               max_positions, ")"));
    }
  }
  const int64_t half = rotary_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* cos = cos_sin + positions[t] * rotary_dim;
    const float* sin = cos + half;
    for (const HeadSet* hs : {&q, &k}) {
      for (int64_t h = 0; h < hs->num_heads; ++h) {
        rotate_head(hs->data + t * hs->token_stride + h * hs->head_stride, cos, sin, half, is_neox);
      }
    }
  }
}

}  // namespace rlm::cpu
