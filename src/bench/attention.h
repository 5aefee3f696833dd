// `radixlm bench attention`: the CUDA paged-attention kernels on fixed shapes, each time printed
// beside a reference measured in the same run (METHOD: a ratio, never a bare time):
//  - decode (split-KV kernel): KV bytes read per second against a cudaMemcpy device-to-device copy
//    of the same bytes (read + write), for the automatic split count and a sweep of fixed ones;
//  - prefill/extend (tensor-core kernel for bf16/f16 caches): causal TFLOP/s at each length, to be
//    divided by tools/sdpa_bench.py's PyTorch SDPA numbers on the same shapes;
//  - cascade: requests extending one shared prefix, the single pass against level 1 (all queries
//    over the shared pages at once) + level 2 + the LSE merge, with the largest output difference.
// Times are medians over --iters runs bracketed by CUDA events, after warm-up. Inputs are uniform
// random (never zeros); the page table is a random permutation of pages. --json writes the numbers.
// Causal FLOPs = 4 * num_qo_heads * head_dim * sum over queries of visible keys (L (L + 1) / 2 per
// request), the count tools/sdpa_bench.py uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlm::bench {

struct AttentionArgs {
  int64_t decode_batch = 32;
  std::vector<int64_t> decode_batches;  // several batch sizes (each with the split sweep); empty: decode_batch
  int64_t decode_len = 2048;
  // Split counts to time per batch (0: the kernel's own choice); empty: 0, 1, 2, 3, 4, 8, 16, 32
  // and the engine's count.
  std::vector<int> decode_splits;
  bool decode_only = false;  // skip the prefill and cascade runs
  std::vector<int64_t> prefill_lens{1024, 4096};
  int64_t prefill_tokens = 16384;  // batch = max(1, prefill_tokens / len)
  int64_t num_qo_heads = 32;
  int64_t num_kv_heads = 8;
  int64_t head_dim = 128;
  int64_t page_size = 16;
  std::string dtype = "bf16";
  int iters = 20;
  std::string json_path;
  // Cascade: a batch of requests whose pages begin with one shared prefix, each extending it.
  int64_t cascade_batch = 32;
  int64_t cascade_prefix = 4096;
  std::vector<int64_t> cascade_new{1, 16, 128};
};

// Prints the report (and --json); returns the process exit code (2 without CUDA).
int run_attention(const AttentionArgs& args);

}  // namespace rlm::bench
