// The start-up memory plan and the serving limits as pure functions: the profile steps cover the
// largest step the scheduler may run, the KV pool gets exactly what the measured parts leave of
// the memory fraction, and the hardware defaults keep what the user gave and grow with the GPU.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "engine/memory_plan.h"
#include "engine/serving_limits.h"

namespace rlm {
namespace {

int64_t step_tokens(const ProfileStep& s) {
  return std::accumulate(s.extend_lens.begin(), s.extend_lens.end(), int64_t{0});
}

TEST(ProfileSteps, CoverTheLargestPrefillMixedAndDecodeSteps) {
  struct Case {
    int64_t tokens, requests, context;
  };
  for (const Case& c : {Case{8192, 512, 131072}, Case{8192, 1, 131072}, Case{16, 64, 4096}, Case{1, 1, 2},
                        Case{2048, 2048, 4096}, Case{8192, 8, 160}, Case{8192, 512, 256}, Case{100, 2, 30}}) {
    const auto [tokens, requests, context] = c;
    for (const bool cascade : {false, true}) {
      SCOPED_TRACE(str(tokens, " tokens, ", requests, " requests, context ", context, ", cascade ", cascade));
      const std::vector<ProfileStep> steps = profile_steps(tokens, requests, context, cascade);
      // The largest step the scheduler can build: the token budget (or every running request's
      // decode token), but no more than every request at the full context.
      const int64_t largest = std::min(std::max(tokens, requests), requests * context);
      int64_t most_tokens = 0, most_requests = 0, most_sampled = 0;
      bool decode = false, cascaded = false;
      for (const ProfileStep& s : steps) {
        ASSERT_FALSE(s.extend_lens.empty());
        for (const int32_t n : s.extend_lens) {
          EXPECT_GE(n, 1);
          EXPECT_LE(s.cached_prefix + n, context) << s.what << ": a request within the context length";
        }
        // No step holds more than the scheduler allows.
        EXPECT_LE(step_tokens(s), largest) << s.what;
        EXPECT_LE(static_cast<int64_t>(s.extend_lens.size()), requests) << s.what;
        most_tokens = std::max(most_tokens, step_tokens(s));
        most_requests = std::max<int64_t>(most_requests, static_cast<int64_t>(s.extend_lens.size()));
        if (s.sample_all) most_sampled = std::max<int64_t>(most_sampled, static_cast<int64_t>(s.extend_lens.size()));
        if (s.mode == ForwardMode::kDecode) {
          decode = true;
          for (const int32_t n : s.extend_lens) EXPECT_EQ(n, 1);
        }
        cascaded = cascaded || (s.cascade && s.cached_prefix > 0);
      }
      EXPECT_EQ(most_tokens, largest);
      EXPECT_EQ(most_requests, requests);
      EXPECT_EQ(most_sampled, requests) << "the sampler's largest batch";
      EXPECT_TRUE(decode);
      EXPECT_EQ(cascaded, cascade);
      for (const int64_t page : {1, 16}) {
        int64_t need = 0;
        for (const ProfileStep& s : steps) {
          int64_t pages = 0;
          for (const int32_t n : s.extend_lens) pages += (s.cached_prefix + n + page - 1) / page;
          need = std::max(need, pages);
        }
        EXPECT_EQ(profile_kv_pages(steps, page), need);
      }
    }
  }
}

// Random profiles: the plan spends the budget on fixed + activations + graphs + reserve + KV and
// leaves less than one page unused.
TEST(MemoryPlan, KvPoolGetsWhatTheMeasuredPartsLeave) {
  std::mt19937_64 rng(7);
  const size_t gib = size_t{1} << 30;
  for (int trial = 0; trial < 500; ++trial) {
    MemoryProfile p;
    p.total_bytes = (16 + rng() % 128) * gib;
    p.used_bytes = rng() % (p.total_bytes / 2);
    p.persistent_bytes = rng() % (p.used_bytes / 8 + 1);
    p.activation_bytes = rng() % (4 * gib);
    p.graph_bytes = rng() % (3 * gib);
    const double fraction = 0.5 + 0.49 * static_cast<double>(rng() % 1000) / 1000.0;
    const size_t per_page = 1 + rng() % (4 << 20);
    const size_t reserve = rng() % (256 << 20);
    const double budget = static_cast<double>(p.total_bytes) * fraction;
    const double parts = static_cast<double>(p.used_bytes - p.persistent_bytes) +
                         static_cast<double>(p.activation_bytes) + static_cast<double>(p.graph_bytes) +
                         static_cast<double>(reserve);
    const StatusOr<MemoryPlan> plan = plan_kv_memory(p, fraction, per_page, reserve, /*min_pages=*/1);
    if (!plan.is_ok()) {
      EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
      EXPECT_LT(budget - parts, static_cast<double>(per_page)) << "refused although a page fits";
      continue;
    }
    const MemoryPlan& m = plan.value();
    EXPECT_EQ(m.fixed_bytes, p.used_bytes - p.persistent_bytes);
    EXPECT_EQ(m.kv_bytes, static_cast<size_t>(m.num_pages) * per_page);
    EXPECT_LE(parts + static_cast<double>(m.kv_bytes), budget + 1.0);
    EXPECT_GT(parts + static_cast<double>(m.kv_bytes + per_page), budget - 1.0) << "a whole page was left unused";
  }
}

TEST(MemoryPlan, TooLittleForOneRequestIsAClearError) {
  MemoryProfile p;
  p.total_bytes = size_t{80} << 30;
  p.used_bytes = size_t{60} << 30;
  p.activation_bytes = size_t{4} << 30;
  p.graph_bytes = size_t{2} << 30;
  const StatusOr<MemoryPlan> plan = plan_kv_memory(p, 0.88, size_t{128} << 10, 0, /*min_pages=*/131072);
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted);
  for (const char* part : {"activations", "CUDA graphs", "KV pool", "--mem-fraction-static"}) {
    EXPECT_NE(plan.status().message().find(part), std::string::npos) << plan.status().to_string();
  }
  EXPECT_EQ(plan_kv_memory(p, 1.5, 1024, 0, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(ServingLimits, DefaultsFollowTheGpuAndKeepWhatIsGiven) {
  const size_t gib = size_t{1} << 30;
  ServingLimits previous;
  for (const size_t mem : {size_t{8}, size_t{16}, size_t{24}, size_t{40}, size_t{48}, size_t{80}, size_t{94},
                           size_t{141}, size_t{192}}) {
    HardwareInfo hw;
    hw.cuda = true;
    hw.gpu_memory_bytes = mem * gib;
    const ServingLimits l = default_serving_limits(hw, {});
    SCOPED_TRACE(str(mem, " GiB"));
    EXPECT_GT(l.chunked_prefill_size, 0);
    EXPECT_GE(l.max_prefill_tokens, l.chunked_prefill_size);
    EXPECT_GT(l.mixed_prefill_tokens, 0);
    EXPECT_LE(l.mixed_prefill_tokens, l.max_prefill_tokens);
    EXPECT_GT(l.cuda_graph_max_bs, 0);
    EXPECT_GE(l.max_running_requests, l.cuda_graph_max_bs) << "graphs beyond the running limit are never used";
    // More memory never lowers a limit.
    EXPECT_GE(l.chunked_prefill_size, previous.chunked_prefill_size);
    EXPECT_GE(l.cuda_graph_max_bs, previous.cuda_graph_max_bs);
    EXPECT_GE(l.max_running_requests, previous.max_running_requests);
    if (mem >= 80) {
      EXPECT_GE(l.cuda_graph_max_bs, 256) << "an 80 GB GPU captures decode graphs up to batch 256";
    }
    previous = l;
  }
  HardwareInfo cpu;
  const ServingLimits c = default_serving_limits(cpu, {});
  EXPECT_EQ(c.cuda_graph_max_bs, 0);
  EXPECT_GT(c.max_running_requests, 0);
  EXPECT_GE(c.max_prefill_tokens, c.chunked_prefill_size);
  EXPECT_EQ(c.mixed_prefill_tokens, c.max_prefill_tokens) << "the CPU gives mixed steps the whole budget";
  // Given values stay, whatever the hardware.
  ServingLimits given;
  given.max_running_requests = 3;
  given.chunked_prefill_size = 5;
  given.max_prefill_tokens = 4;  // below the chunk: it bounds the chunk
  given.cuda_graph_max_bs = 7;
  given.mixed_prefill_tokens = 6;
  for (const HardwareInfo& hw : {cpu, HardwareInfo{true, 80 * gib}}) {
    const ServingLimits l = default_serving_limits(hw, given);
    EXPECT_EQ(l.max_running_requests, 3);
    EXPECT_EQ(l.chunked_prefill_size, 5);
    EXPECT_EQ(l.max_prefill_tokens, 4);
    EXPECT_EQ(l.mixed_prefill_tokens, 6);
    EXPECT_EQ(l.cuda_graph_max_bs, 7);
  }
}

TEST(ServingLimits, RunningLimitShrinksWithASmallKvPool) {
  EXPECT_EQ(running_requests_for_kv(400000, 512), 512);
  EXPECT_EQ(running_requests_for_kv(512 * kMinKvTokensPerRunningRequest, 512), 512);
  EXPECT_EQ(running_requests_for_kv(100 * kMinKvTokensPerRunningRequest + 7, 512), 100);
  EXPECT_EQ(running_requests_for_kv(10, 512), 1);
  EXPECT_EQ(running_requests_for_kv(32768, 64), 64);
}

}  // namespace
}  // namespace rlm
