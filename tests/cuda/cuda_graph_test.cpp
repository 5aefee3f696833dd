// Decode through CUDA graphs on the golden tiny models, against the eager GPU path and the CPU:
//  - greedy tokens with graphs == without graphs == CPU, through the scheduler, for batches that
//    need padding (3 -> 4, 5 -> 8) and that shrink as requests of different lengths finish;
//  - logits of every decode step, graph vs eager on identical state (two runners fed the same
//    tokens): f32 models within 1e-4 max abs (at a captured size the same kernels run on the same
//    data; padded sizes may pick other GEMM kernels, which changes f32 rounding only), 16-bit models
//    within rel. L2 2e-3 (a last-bit difference can flip the 16-bit rounding of an activation);
//  - padded rows write nothing into the KV pool;
//  - the caching allocator makes no raw allocation in steady-state decode and leaks nothing;
//  - --mem-fraction-static sizes the KV pool from the memory left after the weights.
// Skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "engine/cuda_graph_runner.h"
#include "engine/model_loader.h"
#include "engine/sampler.h"
#include "unit/offline_test_util.h"

namespace rlm {
namespace {

std::string source_dir() {
  const char* env = std::getenv("RADIXLM_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : RADIXLM_SOURCE_DIR;
}
const std::string kGoldenDir = source_dir() + "/tests/golden";

// Models decoded eagerly: hybrid linear-attention ones and sparse-MoE ones (their expert grouping
// reads counts back to the host: CausalLM::cuda_graph_capturable).
bool is_hybrid(const std::string& name) {
  std::ifstream in(kGoldenDir + "/" + name + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  const std::string arch = c.value("architectures", nlohmann::json::array()).dump();
  return arch.find("Qwen3Next") != std::string::npos || arch.find("Qwen3Moe") != std::string::npos;
}

// Pure-attention goldens (graphs are captured for these) or the eager ones (hybrid and MoE).
std::vector<std::string> golden_models(bool hybrid = false) {
  std::ifstream in(kGoldenDir + "/index.json");
  if (!in) return {};
  const nlohmann::json index = nlohmann::json::parse(in);
  std::vector<std::string> names;
  for (const auto& n : index["models"]) {
    if (is_hybrid(n.get<std::string>()) == hybrid) names.push_back(n.get<std::string>());
  }
  return names;
}

nlohmann::json golden(const std::string& name) {
  std::ifstream in(kGoldenDir + "/" + name + "/golden.json");
  return nlohmann::json::parse(in);
}

struct RunnerOptions {
  Device device = Device::cuda(0);
  bool graphs = true;
  int64_t max_requests = 8;
  int64_t page_size = 16;
  int64_t max_context_len = 160;
  int64_t num_pages = 0;
  double mem_fraction = 0.0;
};

std::unique_ptr<ModelRunner> make_runner(const std::string& path, const RunnerOptions& o) {
  auto loaded = load_model(path);
  EXPECT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  if (!loaded.is_ok()) return nullptr;
  ModelRunnerConfig rc;
  rc.device = o.device;
  rc.attention_backend = default_attention_backend(o.device);
  rc.page_size = o.page_size;
  rc.max_requests = o.max_requests;
  rc.max_context_len = o.max_context_len;
  rc.num_pages = o.num_pages;
  rc.mem_fraction_static = o.mem_fraction;
  rc.cuda_graph = o.graphs;
  auto runner = ModelRunner::create(std::move(loaded->model), rc);
  EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
  return runner.is_ok() ? std::move(runner).value() : nullptr;
}

// `n` requests with prompts cut from the golden prompts to mixed lengths (1 .. 40 tokens), and
// max_tokens 6 + 5 i, so the batch shrinks as they finish.
std::vector<OfflineRequest> mixed_requests(const nlohmann::json& g, int n) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& c : g["cases"]) prompts.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
  std::vector<OfflineRequest> reqs;
  for (int i = 0; i < n; ++i) {
    const std::vector<int32_t>& p = prompts[i % prompts.size()];
    const size_t len = std::max<size_t>(1, p.size() - static_cast<size_t>(i / prompts.size()) % p.size());
    reqs.push_back(testing::greedy_request(std::vector<int32_t>(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(len)),
                                           6 + 5 * i));
  }
  return reqs;
}

class CudaGraphModels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaGraphModels, GreedyTokensGraphEqualsEagerEqualsCpu) {
  const std::string dir = kGoldenDir + "/" + GetParam();
  const nlohmann::json g = golden(GetParam());
  const bool f32_weights = g["disk_dtype"] == "float32";
  auto graph_runner = make_runner(dir, {});
  RunnerOptions eager_opts;
  eager_opts.graphs = false;
  auto eager_runner = make_runner(dir, eager_opts);
  ASSERT_NE(graph_runner, nullptr);
  ASSERT_NE(eager_runner, nullptr);
  ASSERT_EQ(graph_runner->cuda_graph_batch_sizes(), (std::vector<int64_t>{1, 2, 4, 8})) << "capture failed (see stderr)";
  EXPECT_TRUE(eager_runner->cuda_graph_batch_sizes().empty());
  auto with_graphs = testing::engine_over(std::move(graph_runner));
  auto eager = testing::engine_over(std::move(eager_runner));
  std::unique_ptr<ServingEngine> cpu;
  if (f32_weights) {
    RunnerOptions cpu_opts;
    cpu_opts.device = Device::cpu();
    cpu_opts.graphs = false;
    auto cpu_runner = make_runner(dir, cpu_opts);
    ASSERT_NE(cpu_runner, nullptr);
    cpu = testing::engine_over(std::move(cpu_runner));
  }
  for (int bs : {3, 5}) {
    SCOPED_TRACE(str(GetParam(), " batch ", bs));
    const std::vector<OfflineRequest> reqs = mixed_requests(g, bs);
    const CudaGraphRunner& graphs = *with_graphs->runner().cuda_graph_runner();
    const int64_t replays_before = graphs.num_replays();
    const auto got = testing::generate_ids(*with_graphs, reqs);
    // Every decode step replays a graph: all requests prefill in one step, then the longest one
    // decodes max_tokens - 1 more tokens (overlap scheduling never launches a step for a request
    // that ends by length).
    const int64_t replays = graphs.num_replays() - replays_before;
    EXPECT_EQ(replays, reqs.back().params.max_new_tokens - 1);
    const auto want = testing::generate_ids(*eager, reqs);
    EXPECT_EQ(got, want) << "graph vs eager";
    if (cpu) {
      EXPECT_EQ(got, testing::generate_ids(*cpu, reqs)) << "graph vs CPU";
    }
  }
}

// Two runners (graphs on/off) fed the same requests and the same tokens: every decode step's
// logits must agree. Prompts of 5, 17, 33, 64 and 100 tokens cross page boundaries (page size 16).
TEST_P(CudaGraphModels, DecodeLogitsGraphMatchEager) {
  const std::string dir = kGoldenDir + "/" + GetParam();
  const nlohmann::json g = golden(GetParam());
  const bool f32_weights = g["disk_dtype"] == "float32";
  auto graph = make_runner(dir, {});
  RunnerOptions eager_opts;
  eager_opts.graphs = false;
  auto eager = make_runner(dir, eager_opts);
  ASSERT_NE(graph, nullptr);
  ASSERT_NE(eager, nullptr);
  ASSERT_NE(graph->cuda_graph_runner(), nullptr) << "capture failed (see stderr)";
  const int64_t vocab = graph->model_config().vocab_size;
  const std::vector<int> lens = {5, 17, 33, 64, 100};
  for (int bs : {1, 3, 4, 5, 8}) {
    SCOPED_TRACE(str(GetParam(), " batch ", bs));
    std::vector<BatchEntry> prefill;
    std::vector<int32_t> slots_g, slots_e;
    for (int r = 0; r < bs; ++r) {
      BatchEntry e;
      e.req_slot = graph->req_to_token().alloc();
      ASSERT_EQ(e.req_slot, eager->req_to_token().alloc());
      const int len = lens[r % lens.size()] + r / static_cast<int>(lens.size());
      for (int i = 0; i < len; ++i) {
        e.new_ids.push_back(static_cast<int32_t>((7 * i + 3 * r + 1) % vocab));
        // Request r owns slots [16 + r * 160, ...): page 0 stays untouched by real requests.
        e.new_slots.push_back(16 + r * 160 + i);
      }
      prefill.push_back(std::move(e));
    }
    ForwardBatch pg = graph->build_batch(ForwardMode::kExtend, prefill);
    ForwardBatch pe = eager->build_batch(ForwardMode::kExtend, prefill);
    const std::vector<SampleRow> greedy(static_cast<size_t>(bs), SampleRow::greedy());
    const Sampler graph_sampler(graph->future_tokens()), eager_sampler(eager->future_tokens());
    std::vector<int32_t> next = sampled_tokens(graph_sampler.sample(graph->forward(pg), greedy));
    (void)eager_sampler.sample(eager->forward(pe), greedy);
    double worst = 0.0;
    for (int step = 0; step < 12; ++step) {
      std::vector<BatchEntry> dec;
      for (int r = 0; r < bs; ++r) {
        BatchEntry e;
        e.req_slot = prefill[r].req_slot;
        e.prefix_len = static_cast<int32_t>(prefill[r].new_ids.size()) + step;
        e.new_ids = {next[r]};
        e.new_slots = {16 + r * 160 + e.prefix_len};
        dec.push_back(std::move(e));
      }
      ForwardBatch dg = graph->build_batch(ForwardMode::kDecode, dec);
      ForwardBatch de = eager->build_batch(ForwardMode::kDecode, dec);
      const int64_t replays = graph->cuda_graph_runner()->num_replays();
      const Tensor lg = graph->forward(dg).to(Device::cpu());
      const Tensor le = eager->forward(de).to(Device::cpu());
      ASSERT_EQ(graph->cuda_graph_runner()->num_replays(), replays + 1) << "the decode step did not replay";
      ASSERT_EQ(lg.shape(), (Shape{bs, vocab}));
      ASSERT_EQ(le.shape(), (Shape{bs, vocab}));
      double max_abs = 0.0, err2 = 0.0, ref2 = 0.0;
      for (int64_t i = 0; i < lg.numel(); ++i) {
        const double a = lg.data<float>()[i], b = le.data<float>()[i];
        ASSERT_FALSE(std::isnan(a)) << "NaN in graph logits at " << i;
        max_abs = std::max(max_abs, std::abs(a - b));
        err2 += (a - b) * (a - b);
        ref2 += b * b;
      }
      worst = std::max(worst, max_abs);
      if (f32_weights) {
        EXPECT_LE(max_abs, 1e-4) << "step " << step;
      } else {
        EXPECT_LE(std::sqrt(err2 / ref2), 2e-3) << "step " << step;
      }
      // A second replay of the same step: same KV slots.
      next = sampled_tokens(graph_sampler.sample(graph->forward(dg), greedy));
      (void)eager_sampler.sample(eager->forward(de), greedy);
    }
    std::printf("%s bs %d: max |graph - eager| over 12 steps = %.3g\n", GetParam().c_str(), bs, worst);
    for (const BatchEntry& e : prefill) {
      graph->req_to_token().free(e.req_slot);
      eager->req_to_token().free(e.req_slot);
    }
  }
  // Padded rows (out_cache_loc -1) never wrote: page 0 (slots 0..15) is still all zeros.
  for (int64_t l = 0; l < graph->kv_pool().config().num_layers; ++l) {
    for (const Tensor* buf : {&graph->kv_pool().k_buffer(l), &graph->kv_pool().v_buffer(l)}) {
      const Tensor host = buf->slice(0, 0, 16).to(Device::cpu()).to(DType::kF32);
      for (int64_t i = 0; i < host.numel(); ++i) {
        ASSERT_EQ(host.data<float>()[i], 0.0f) << "layer " << l << ": KV page 0 was written (element " << i << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, CudaGraphModels, ::testing::ValuesIn(golden_models()));

// Hybrid linear-attention models capture no graphs (their per-step state plumbing is not
// graph-safe yet), nor do sparse-MoE models, and they decode eagerly with the same tokens as the CPU.
TEST(CudaGraphHybrid, NoGraphsAndSameTokensAsCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::string> hybrids = golden_models(/*hybrid=*/true);
  ASSERT_FALSE(hybrids.empty());
  for (const std::string& name : hybrids) {
    SCOPED_TRACE(name);
    const nlohmann::json g = golden(name);
    auto gpu = make_runner(kGoldenDir + "/" + name, {});
    RunnerOptions cpu_opts;
    cpu_opts.device = Device::cpu();
    cpu_opts.graphs = false;
    auto cpu = make_runner(kGoldenDir + "/" + name, cpu_opts);
    ASSERT_NE(gpu, nullptr);
    ASSERT_NE(cpu, nullptr);
    EXPECT_TRUE(gpu->cuda_graph_batch_sizes().empty());
    const std::vector<OfflineRequest> reqs = mixed_requests(g, 3);
    auto gpu_engine = testing::engine_over(std::move(gpu));
    auto cpu_engine = testing::engine_over(std::move(cpu));
    EXPECT_EQ(testing::generate_ids(*gpu_engine, reqs), testing::generate_ids(*cpu_engine, reqs));
  }
}

// Steady-state decode with graphs and without: after the first steps, no raw cudaMalloc, and the
// blocks in use come back to the same count after every step (nothing leaks per step; the bytes
// may vary within the allocator's 5/4 best-fit slack).
TEST(CudaGraphRunner, DecodeMakesNoRawAllocationsAndLeaksNothing) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    RunnerOptions o;
    o.graphs = graphs;
    auto runner = make_runner(kGoldenDir + "/qwen3_gqa2_hd128", o);
    ASSERT_NE(runner, nullptr);
    ASSERT_EQ(runner->cuda_graph_runner() != nullptr, graphs);
    const int bs = 5;
    std::vector<BatchEntry> prefill;
    for (int r = 0; r < bs; ++r) {
      BatchEntry e;
      e.req_slot = runner->req_to_token().alloc();
      for (int i = 0; i < 20 + r; ++i) {
        e.new_ids.push_back(static_cast<int32_t>(i + r));
        e.new_slots.push_back(r * 160 + i);
      }
      prefill.push_back(std::move(e));
    }
    const std::vector<SampleRow> greedy(static_cast<size_t>(bs), SampleRow::greedy());
    const Sampler sampler(runner->future_tokens());
    ForwardBatch pb = runner->build_batch(ForwardMode::kExtend, prefill);
    std::vector<int32_t> next = sampled_tokens(sampler.sample(runner->forward(pb), greedy));
    CachingAllocator& alloc = cuda_allocator(0);
    int64_t raw_allocs = -1, live_blocks = -1;
    size_t allocated = 0;
    for (int step = 0; step < 60; ++step) {
      std::vector<BatchEntry> dec;
      for (int r = 0; r < bs; ++r) {
        BatchEntry e;
        e.req_slot = prefill[r].req_slot;
        e.prefix_len = 20 + r + step;
        e.new_ids = {next[r]};
        e.new_slots = {r * 160 + e.prefix_len};
        dec.push_back(std::move(e));
      }
      {
        ForwardBatch db = runner->build_batch(ForwardMode::kDecode, dec);
        next = sampled_tokens(sampler.sample(runner->forward(db), greedy));
      }
      const AllocatorStats s = alloc.stats();
      if (step == 4) {
        raw_allocs = s.num_raw_allocs;
        live_blocks = s.num_live_blocks;
        allocated = s.allocated_bytes;
      } else if (step > 4) {
        ASSERT_EQ(s.num_raw_allocs, raw_allocs) << "cudaMalloc in steady-state decode at step " << step;
        ASSERT_EQ(s.num_live_blocks, live_blocks) << "blocks in use grew at step " << step << ": " << alloc.describe();
        ASSERT_LE(s.allocated_bytes, allocated + allocated / 4) << "at step " << step << ": " << alloc.describe();
      }
    }
    std::printf("%s: %s\n", graphs ? "graphs" : "eager", alloc.describe().c_str());
  }
}

TEST(CudaGraphRunner, MemFractionSizesTheKvPool) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = kGoldenDir + "/llama_gqa4_hd128_llama3rope";
  cuda_allocator(0).empty_cache();
  const DeviceMemoryInfo before = device_memory_info(Device::cuda(0));
  RunnerOptions o;
  o.mem_fraction = 0.5;
  o.graphs = false;
  auto runner = make_runner(dir, o);
  ASSERT_NE(runner, nullptr);
  cuda_allocator(0).empty_cache();
  const DeviceMemoryInfo after = device_memory_info(Device::cuda(0));
  const size_t used_after = after.total_bytes - after.free_bytes;
  const double target = 0.5 * static_cast<double>(after.total_bytes);
  const size_t bytes_per_token = runner->kv_pool().bytes_per_token();
  std::printf("mem fraction 0.5: %lld KV tokens (%.2f GiB), device used %.2f GiB of %.2f (before: %.2f)\n",
              static_cast<long long>(runner->kv_pool().num_slots()),
              static_cast<double>(runner->kv_pool().num_slots() * bytes_per_token) / (1 << 30),
              static_cast<double>(used_after) / (1 << 30), static_cast<double>(after.total_bytes) / (1 << 30),
              static_cast<double>(before.total_bytes - before.free_bytes) / (1 << 30));
  // The pool fills the fraction up to the allocator's rounding reserve and the small tables
  // (req_to_token mirror) made after it: within 256 MiB below the target, never above it by more
  // than one page.
  EXPECT_LE(static_cast<double>(used_after), target + 256.0 * (1 << 20));
  EXPECT_GE(static_cast<double>(used_after), target - 256.0 * (1 << 20));
  runner.reset();
  // A context that cannot fit is a clear error.
  o.mem_fraction = 0.01;
  o.max_context_len = int64_t{1} << 31;
  auto loaded = load_model(dir);
  ASSERT_TRUE(loaded.is_ok());
  ModelRunnerConfig rc;
  rc.device = Device::cuda(0);
  rc.attention_backend = "native";
  rc.page_size = 16;
  rc.max_context_len = o.max_context_len;
  rc.mem_fraction_static = 0.01;
  auto bad = ModelRunner::create(std::move(loaded->model), rc);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("leaves room for"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace rlm
