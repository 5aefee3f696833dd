// `radixlm bench gemv`: the decode-shape linears of Llama-3.1-8B (qkv, o, gate_up, down, lm_head;
// 16-bit weights, f32 x and out) through ops::linear at small m, once with the GEMV kernel and once
// with the cuBLAS path (cuda::set_linear_gemv_enabled; GGUF Q4_K / Q5_K: the one-group kernel;
// fp8_e4m3 weights with per-channel scales: fp8_linear's path once, its activation quantization
// included, "path" naming it), each beside a cudaMemcpy device-to-device
// copy of the same weight bytes measured in the same run (METHOD: a ratio, never a bare time).
// Bandwidth = weight bytes / time for the linears and (read + write) / time for the copy, so a
// ratio of 1.0 means the linear streams its weight as fast as the copy engine path moves bytes.
// Each measurement cycles through enough weight copies (>= 256 MiB in all) that the 50 MB L2
// cannot hold them; the time of one linear is the cycle's time / copies, the median over --iters
// cycles after warm-up. The "step" line adds up one decode step's linears (32 layers + lm_head).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlm::bench {

struct GemvArgs {
  std::vector<int64_t> ms{1};
  std::string dtype = "bf16";
  int64_t layers = 32;
  int iters = 20;
  std::string json_path;
};

// Prints the report (and --json); returns the process exit code (2 without CUDA).
int run_gemv(const GemvArgs& args);

}  // namespace rlm::bench
