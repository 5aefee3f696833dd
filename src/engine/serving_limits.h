// Serving limits that follow the hardware when the user leaves them unset (0): the prompt chunk
// size and step token budget, the CUDA-graph batch limit, and the running-request limit. Pure
// functions (unit-tested on the CPU); `serve`, `generate` and `bench one-batch` call them.
//
//   GPU memory          chunked-prefill  max-prefill  mixed-prefill  cuda-graph-max-bs  running cap
//   CPU                 2048             8192         8192           -                  64
//   < 20 GiB            2048             2048         2048           32                 128
//   < 40 GiB            4096             4096         2048           128                256
//   < 100 GiB (80 GB)   8192             8192         512            256                512
//   >= 100 GiB          8192             8192         512            512                1024
//
// mixed-prefill is the most prompt tokens of a step that also decodes (never above max-prefill):
// on an H100 (Llama-3.1-8B shape, bf16) 2048 instead of 8192 cut the P99 inter-token latency at
// 256 streams from 239 to 75 ms (128/128) and from 268 to 90 ms (1024/1024) at 1% less
// throughput, and 512 instead of 2048 cut it at 128 streams from 63.0 to 22.6 ms (2.35x the
// median ITL) and at 256 streams from 70.8 to 29.8 / 93.2 to 46.0 ms, with throughput within
// 0.5-2.5% and median TTFT 65 instead of 186 ms at 128/128, but 6.4 instead of 4.4 s for a burst of
// 256 1,024-token prompts (docs/perf/serving_matrix.md); steps without decodes still take
// max-prefill tokens.
//
// A step carries at most max-prefill-tokens new tokens (decode tokens included), so the profile run
// that sizes the KV pool (engine/memory_plan.h) plans for that many. The running limit is the cap,
// lowered to KV capacity / 256 tokens when the KV pool is small (each running request can hold at
// least 256 tokens of KV before retraction); decode batches above the CUDA-graph limit run eagerly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace rlm {

struct HardwareInfo {
  bool cuda = false;
  size_t gpu_memory_bytes = 0;  // total memory of the GPU (unused on the CPU)
};
HardwareInfo hardware_info(Device device);

struct ServingLimits {
  int64_t max_running_requests = 0;  // before the KV pool is sized: the cap (the profile's decode batch)
  int64_t chunked_prefill_size = 0;
  int64_t max_prefill_tokens = 0;
  int64_t mixed_prefill_tokens = 0;
  int64_t cuda_graph_max_bs = 0;  // 0 on the CPU
};

// `given` with every unset (<= 0) field filled from the table above; a given max_prefill_tokens
// below the chunk size is kept (it bounds the chunk), a default one is at least the chunk size; a
// default mixed_prefill_tokens is at most max_prefill_tokens.
ServingLimits default_serving_limits(const HardwareInfo& hw, const ServingLimits& given);

// The running-request limit once the KV pool holds kv_tokens: min(cap, max(1, kv_tokens / 256)).
int64_t running_requests_for_kv(int64_t kv_tokens, int64_t cap);

inline constexpr int64_t kMinKvTokensPerRunningRequest = 256;

}  // namespace rlm
