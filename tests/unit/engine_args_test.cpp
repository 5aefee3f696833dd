// EngineArgs, the one set of engine settings of serve / generate / chat / the benchmarks: what it
// hands the ModelRunner and the Scheduler, the per-command automatic KV capacity, and the checks
// that the flag parser cannot make.
#include <gtest/gtest.h>

#include "engine/engine_args.h"
#include "model/model_config.h"
#include "scheduler/scheduler.h"

namespace rlm {
namespace {

ModelConfig model_with_context(int64_t max_position_embeddings) {
  ModelConfig m;
  m.max_position_embeddings = max_position_embeddings;
  return m;
}

TEST(EngineArgs, RunnerAndSchedulerConfigs) {
  EngineArgs a;
  a.page_size = 4;
  a.max_running_requests = 7;
  a.max_mamba_cache_size = 9;
  a.prefill_attention_backend = "cpu";
  a.cascade_attention = "off";
  a.cuda_graph_max_bs = 24;
  a.chunked_prefill_size = 100;
  a.max_prefill_tokens = 300;
  a.schedule_policy = "lpm";
  a.cache = "naive";
  a.max_queued_requests = 5;
  a.disable_overlap_schedule = true;
  const ModelConfig m = model_with_context(2048);
  const ModelRunnerConfig rc = a.runner_config(m, Device::cpu());
  EXPECT_EQ(rc.device, Device::cpu());
  EXPECT_EQ(rc.attention_backend, "cpu");  // the CPU's default
  EXPECT_EQ(rc.prefill_attention_backend, "cpu");
  EXPECT_EQ(rc.page_size, 4);
  EXPECT_EQ(rc.max_requests, 7);
  EXPECT_EQ(rc.max_context_len, 2048);  // the model's
  EXPECT_EQ(rc.mamba_slots, 9);
  EXPECT_EQ(rc.cascade_attention, CascadeMode::kOff);
  EXPECT_TRUE(rc.cuda_graph);
  EXPECT_EQ(rc.cuda_graph_max_bs, 24);
  const SchedulerConfig sc = a.scheduler_config(m);
  EXPECT_EQ(sc.max_running_requests, 7);
  EXPECT_EQ(sc.chunked_prefill_size, 100);
  EXPECT_EQ(sc.max_prefill_tokens, 300);
  EXPECT_EQ(sc.policy, SchedulePolicy::kLpm);
  EXPECT_EQ(sc.cache, CacheKind::kNaive);
  EXPECT_TRUE(sc.enable_mixed_chunk);
  EXPECT_EQ(rc.max_num_tokens, 300);  // the memory plan's largest step is the step budget
  EXPECT_EQ(sc.max_queued_requests, 5);
  EXPECT_FALSE(sc.overlap_schedule);
  EXPECT_EQ(sc.max_context_len, 2048);
  a.context_length = 300;
  EXPECT_EQ(a.runner_config(m, Device::cpu()).max_context_len, 300);
  EXPECT_EQ(a.scheduler_config(m).max_context_len, 300);
}

TEST(EngineArgs, KvCacheDtypeAndQuantization) {
  const ModelConfig m = model_with_context(512);
  EngineArgs a;
  EXPECT_EQ(a.runner_config(m, Device::cpu()).kv_dtype, DType::kF32);  // auto
  for (const DType model_dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    ModelConfig typed = m;
    typed.dtype = model_dtype;
    EXPECT_EQ(a.runner_config(typed, Device::cpu()).kv_dtype, DType::kF32) << dtype_name(model_dtype);
    EXPECT_EQ(a.runner_config(typed, Device::cuda(0)).kv_dtype, model_dtype) << dtype_name(model_dtype);
  }
  for (const auto& [name, dtype] : std::vector<std::pair<std::string, DType>>{
           {"bf16", DType::kBF16}, {"f16", DType::kF16}, {"f32", DType::kF32}, {"fp8_e4m3", DType::kF8E4M3}}) {
    a.kv_cache_dtype = name;
    ASSERT_TRUE(a.validate().is_ok()) << name;
    EXPECT_EQ(a.runner_config(m, Device::cpu()).kv_dtype, dtype) << name;
  }
  a.kv_cache_dtype = "fp8_e5m2";
  EXPECT_NE(a.validate().message().find("--kv-cache-dtype"), std::string::npos);
  a.kv_cache_dtype = "auto";
  a.quantization = "fp8";
  a.load_format = "dummy";
  a.seed = 3;
  ASSERT_TRUE(a.validate().is_ok());
  const LoadOptions lo = a.load_options();
  EXPECT_EQ(lo.quantization, "fp8");
  EXPECT_EQ(lo.load_format, "dummy");
  EXPECT_EQ(lo.dummy_seed, 3u);
  a.quantization = "int8";
  EXPECT_NE(a.validate().message().find("--quantization"), std::string::npos);
}

TEST(EngineArgs, KvCapacityPerCommand) {
  const ModelConfig m = model_with_context(512);
  EngineArgs a;
  a.page_size = 16;
  // Defaults (generate, chat): the memory fraction on CUDA, max_requests full contexts on the CPU.
  ModelRunnerConfig cpu = a.runner_config(m, Device::cpu()), gpu = a.runner_config(m, Device::cuda(0));
  EXPECT_EQ(cpu.num_pages, 0);
  EXPECT_EQ(cpu.mem_fraction_static, 0.0);
  EXPECT_EQ(gpu.num_pages, 0);
  EXPECT_EQ(gpu.mem_fraction_static, 0.88);
  EXPECT_EQ(gpu.attention_backend, "native");
  // serve: 32768 tokens on the CPU.
  a.cpu_total_tokens = 32768;
  EXPECT_EQ(a.runner_config(m, Device::cpu()).num_pages, 2048);
  EXPECT_EQ(a.runner_config(m, Device::cuda(0)).mem_fraction_static, 0.88);
  // bench offline: room for the running requests on CUDA too.
  a.cpu_total_tokens = 0;
  a.kv_from_memory = false;
  gpu = a.runner_config(m, Device::cuda(0));
  EXPECT_EQ(gpu.num_pages, 0);
  EXPECT_EQ(gpu.mem_fraction_static, 0.0);
  // --max-total-tokens wins everywhere, rounded up to whole pages.
  a.kv_from_memory = true;
  a.max_total_tokens = 100;
  for (Device d : {Device::cpu(), Device::cuda(0)}) {
    const ModelRunnerConfig rc = a.runner_config(m, d);
    EXPECT_EQ(rc.num_pages, 7) << d.to_string();
    EXPECT_EQ(rc.mem_fraction_static, 0.0) << d.to_string();
  }
}

// Limits left at 0 are chosen for the hardware (serving_limits.h); given ones are kept.
TEST(EngineArgs, LimitsForTheHardware) {
  HardwareInfo h100{true, size_t{80} << 30};
  const EngineArgs a = EngineArgs().with_limits_for(h100);
  const ServingLimits want = default_serving_limits(h100, {});
  EXPECT_EQ(a.max_running_requests, want.max_running_requests);
  EXPECT_EQ(a.chunked_prefill_size, want.chunked_prefill_size);
  EXPECT_EQ(a.max_prefill_tokens, want.max_prefill_tokens);
  EXPECT_EQ(a.mixed_prefill_tokens, want.mixed_prefill_tokens);
  EXPECT_EQ(a.scheduler_config(ModelConfig{}).mixed_prefill_tokens, want.mixed_prefill_tokens);
  EXPECT_EQ(a.cuda_graph_max_bs, want.cuda_graph_max_bs);
  EXPECT_GE(a.cuda_graph_max_bs, 256);
  EngineArgs given;
  given.max_running_requests = 3;
  given.chunked_prefill_size = 5;
  given.max_prefill_tokens = 7;
  given.cuda_graph_max_bs = 11;
  given.mixed_prefill_tokens = 13;
  for (const HardwareInfo& hw : {h100, HardwareInfo{}}) {
    const EngineArgs g = given.with_limits_for(hw);
    EXPECT_EQ(g.mixed_prefill_tokens, 13);
    EXPECT_EQ(g.max_running_requests, 3);
    EXPECT_EQ(g.chunked_prefill_size, 5);
    EXPECT_EQ(g.max_prefill_tokens, 7);
    EXPECT_EQ(g.cuda_graph_max_bs, 11);
  }
  // The CPU keeps the limits it had before they followed the hardware.
  const EngineArgs cpu = EngineArgs().with_limits_for(HardwareInfo{});
  EXPECT_EQ(cpu.max_running_requests, 64);
  EXPECT_EQ(cpu.chunked_prefill_size, 2048);
  EXPECT_EQ(cpu.max_prefill_tokens, 8192);
  EXPECT_TRUE(cpu.validate().is_ok());
}

TEST(EngineArgs, ValidateNamesTheFlag) {
  EXPECT_TRUE(EngineArgs().validate().is_ok());
  auto error_of = [](auto change) {
    EngineArgs a;
    change(a);
    const Status st = a.validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return st.message();
  };
  EXPECT_NE(error_of([](EngineArgs& a) { a.device = "tpu"; }).find("unknown device 'tpu'"), std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.cascade_attention = "maybe"; }).find("--cascade-attention"),
            std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.page_size = 0; }).find("--page-size"), std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.schedule_policy = "lifo"; }).find("--schedule-policy"), std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.cache = "lru"; }).find("--cache"), std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.mem_fraction_static = 1.0; }).find("--mem-fraction-static"),
            std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.max_running_requests = -1; }).find("running-request limit"),
            std::string::npos);
  EXPECT_NE(error_of([](EngineArgs& a) { a.max_prefill_tokens = -1; }).find("--max-prefill-tokens"),
            std::string::npos);
}

}  // namespace
}  // namespace rlm
