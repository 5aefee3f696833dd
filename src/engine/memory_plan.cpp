#include "engine/memory_plan.h"

#include <algorithm>

namespace rlm {

namespace {
constexpr int32_t kProfileCachedPrefix = 256;  // a cached prefix long enough for cascade attention
double gib(size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }
}  // namespace

namespace {

// `total` tokens as requests of at most `cap` tokens each.
std::vector<int32_t> split_tokens(int64_t total, int64_t cap) {
  std::vector<int32_t> lens;
  for (int64_t left = total; left > 0; left -= cap) lens.push_back(static_cast<int32_t>(std::min(left, cap)));
  return lens;
}

}  // namespace

std::vector<ProfileStep> profile_steps(int64_t max_num_tokens, int64_t max_requests, int64_t max_context_len,
                                       bool cascade) {
  RLM_CHECK(max_num_tokens > 0 && max_requests > 0 && max_context_len > 0)
      << "profile_steps(" << max_num_tokens << ", " << max_requests << ", " << max_context_len << ")";
  std::vector<ProfileStep> steps;
  // Prompt chunks fill the token budget, each request within the context length.
  ProfileStep prefill;
  prefill.what = "prefill";
  prefill.extend_lens = split_tokens(std::min(max_num_tokens, max_requests * max_context_len), max_context_len);
  steps.push_back(prefill);
  // A step holds at most max(max_num_tokens, max_requests) tokens: decode tokens count against the
  // token budget, and every running request decodes even when they alone exceed it.
  ProfileStep mixed;
  mixed.what = "mixed";
  mixed.extend_lens.assign(static_cast<size_t>(max_requests - 1), 1);
  mixed.extend_lens.push_back(
      static_cast<int32_t>(std::clamp<int64_t>(max_num_tokens - (max_requests - 1), 1, max_context_len)));
  mixed.sample_all = true;
  steps.push_back(mixed);
  ProfileStep decode;
  decode.what = "decode";
  decode.mode = ForwardMode::kDecode;
  decode.extend_lens.assign(static_cast<size_t>(max_requests), 1);
  decode.sample_all = true;
  steps.push_back(decode);
  const int64_t cached = std::min<int64_t>(kProfileCachedPrefix, max_context_len - 1);
  if (cascade && cached > 0) {
    ProfileStep c;
    c.what = "cascade prefill";
    c.cached_prefix = static_cast<int32_t>(cached);
    c.extend_lens = split_tokens(std::min(max_num_tokens, max_requests * (max_context_len - cached)),
                                 max_context_len - cached);
    c.cascade = true;
    steps.push_back(c);
  }
  return steps;
}

int64_t profile_kv_pages(const std::vector<ProfileStep>& steps, int64_t page_size) {
  RLM_CHECK(page_size > 0) << "profile_kv_pages: page size " << page_size;
  int64_t most = 0;
  for (const ProfileStep& s : steps) {
    int64_t pages = 0;
    for (const int32_t n : s.extend_lens) pages += (s.cached_prefix + n + page_size - 1) / page_size;
    most = std::max(most, pages);
  }
  return most;
}

std::string MemoryPlan::describe() const {
  return str("GPU memory ", gib(profile.total_bytes), " GiB x ", fraction, " = ", gib(budget_bytes),
             " GiB: weights and fixed ", gib(fixed_bytes), " GiB, activations (largest step) ",
             gib(profile.activation_bytes), " GiB, CUDA graphs ", gib(profile.graph_bytes), " GiB, KV pool ",
             gib(kv_bytes), " GiB (", num_pages, " pages)");
}

StatusOr<MemoryPlan> plan_kv_memory(const MemoryProfile& profile, double fraction, size_t bytes_per_page,
                                    size_t reserve_bytes, int64_t min_pages) {
  if (!(fraction > 0.0 && fraction < 1.0)) {
    return invalid_argument(str("--mem-fraction-static must be in (0, 1), got ", fraction));
  }
  RLM_CHECK(bytes_per_page > 0) << "plan_kv_memory: zero bytes per page";
  RLM_CHECK(profile.persistent_bytes <= profile.used_bytes && profile.used_bytes <= profile.total_bytes)
      << "plan_kv_memory: inconsistent profile (used " << profile.used_bytes << ", persistent "
      << profile.persistent_bytes << ", total " << profile.total_bytes << ")";
  MemoryPlan plan;
  plan.fraction = fraction;
  plan.profile = profile;
  plan.budget_bytes = static_cast<size_t>(static_cast<double>(profile.total_bytes) * fraction);
  plan.fixed_bytes = profile.used_bytes - profile.persistent_bytes;
  plan.reserve_bytes = reserve_bytes;
  const double left = static_cast<double>(plan.budget_bytes) - static_cast<double>(plan.fixed_bytes) -
                      static_cast<double>(profile.activation_bytes) - static_cast<double>(profile.graph_bytes) -
                      static_cast<double>(reserve_bytes);
  plan.num_pages = left > 0.0 ? static_cast<int64_t>(left / static_cast<double>(bytes_per_page)) : 0;
  plan.kv_bytes = static_cast<size_t>(plan.num_pages) * bytes_per_page;
  if (plan.num_pages < min_pages) {
    return Status(StatusCode::kResourceExhausted,
                  str(plan.describe(), ": one request of the context length needs ", min_pages,
                      " pages; raise --mem-fraction-static, or lower the context length, --max-prefill-tokens or "
                      "--max-running-requests"));
  }
  return plan;
}

}  // namespace rlm
