// CPU rotary position embedding: HF inverse-frequency schemes and in-place rotation of q/k heads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlm::cpu {

// HF rope init, step by step in f32 like torch (modeling_rope_utils.py):
//   inv_freq[i] = 1 / theta^(float(2i) / rotary_dim), i < rotary_dim / 2;
//   "linear": inv_freq / factor;  "llama3": _compute_llama3_parameters (wavelength bands with
//   low/high frequency factors and smooth interpolation between them).
// scaling_type "" and "default" mean no scaling. Throws rlm::Error on an unknown type.
std::vector<float> rope_inv_freq(int64_t rotary_dim, double theta, const std::string& scaling_type,
                                 double factor, double low_freq_factor, double high_freq_factor,
                                 int64_t original_max_position);

// cos_sin: [max_positions, rotary_dim] row-major; row p = [cos(p*inv_freq[0..half)), sin(...)],
// with p*inv_freq and cos/sin evaluated in f32.
void rope_cos_sin(const std::vector<float>& inv_freq, int64_t max_positions, float* cos_sin);

// Heads of one tensor: head h of token t starts at data + t*token_stride + h*head_stride.
struct HeadSet {
  float* data = nullptr;
  int64_t num_heads = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
};

// Rotates the first rotary_dim dims of every head of q and k in place. neox: pairs (i, i + half);
// GPT-J: pairs (2i, 2i + 1); pair i uses cos/sin column i of the position's cache row.
// positions are validated (0 <= p < max_positions) before anything is modified.
void rotary_embedding(const HeadSet& q, const HeadSet& k, int64_t num_tokens, const int64_t* positions,
                      const float* cos_sin, int64_t max_positions, int64_t rotary_dim, bool is_neox);

}  // namespace rlm::cpu
