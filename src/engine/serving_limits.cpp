#include "engine/serving_limits.h"

#include <algorithm>

#include "core/check.h"

namespace rlm {

namespace {

struct Row {
  int64_t chunk, budget, mixed_budget, graph_bs, running_cap;
};

Row row_for(const HardwareInfo& hw) {
  if (!hw.cuda) return {2048, 8192, 8192, 0, 64};
  const double gib = static_cast<double>(hw.gpu_memory_bytes) / (1024.0 * 1024.0 * 1024.0);
  if (gib < 20.0) return {2048, 2048, 2048, 32, 128};
  if (gib < 40.0) return {4096, 4096, 2048, 128, 256};
  if (gib < 100.0) return {8192, 8192, 512, 256, 512};
  return {8192, 8192, 512, 512, 1024};
}

}  // namespace

HardwareInfo hardware_info(Device device) {
  HardwareInfo hw;
  hw.cuda = device.is_cuda();
  if (hw.cuda) hw.gpu_memory_bytes = device_memory_info(device).total_bytes;
  return hw;
}

ServingLimits default_serving_limits(const HardwareInfo& hw, const ServingLimits& given) {
  const Row row = row_for(hw);
  ServingLimits out = given;
  if (out.chunked_prefill_size <= 0) out.chunked_prefill_size = row.chunk;
  if (out.max_prefill_tokens <= 0) out.max_prefill_tokens = std::max(row.budget, out.chunked_prefill_size);
  if (out.mixed_prefill_tokens <= 0) out.mixed_prefill_tokens = std::min(row.mixed_budget, out.max_prefill_tokens);
  if (out.cuda_graph_max_bs <= 0) out.cuda_graph_max_bs = row.graph_bs;
  if (out.max_running_requests <= 0) out.max_running_requests = row.running_cap;
  return out;
}

int64_t running_requests_for_kv(int64_t kv_tokens, int64_t cap) {
  RLM_CHECK(cap > 0) << "running_requests_for_kv: cap " << cap;
  return std::clamp<int64_t>(kv_tokens / kMinKvTokensPerRunningRequest, 1, cap);
}

}  // namespace rlm
