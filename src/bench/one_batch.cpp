#include "bench/one_batch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "bench/cuda_timing.h"
#include "dist/collectives_bench.h"
#include "dist/tp_group.h"
#include "engine/cuda_graph_runner.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/pdl.h"
#endif
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/thread_pool.h"
#include "model/qwen3_next.h"
#include "ops/ops.h"
#include "server/engine_builder.h"

namespace rlm::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Bytes per element of a dtype (block-quantized: the block's bytes over its elements).
double bytes_per_element(DType dtype) {
  return static_cast<double>(dtype_block_bytes(dtype)) / static_cast<double>(dtype_block_size(dtype));
}

// Bytes of every weight of a Llama-family model in `dtype` (embedding, layers, norm, untied head);
// with fp8_projections the q/k/v/o and MLP projections count one byte per weight (their f32
// per-channel scales are negligible).
double weight_bytes(const ModelConfig& c, DType dtype, bool fp8_projections = false) {
  const double h = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
  const double qkv = h * d * static_cast<double>(c.num_attention_heads + 2 * c.num_key_value_heads);
  const double o = d * static_cast<double>(c.num_attention_heads) * h;
  const double mlp = 3.0 * h * static_cast<double>(c.intermediate_size);
  const double es = bytes_per_element(dtype);
  const double layer = (qkv + o + mlp) * (fp8_projections ? 1.0 : es) + 2.0 * h * es;
  const double embed = static_cast<double>(c.vocab_size) * h;
  return (embed * (c.tie_word_embeddings ? 1.0 : 2.0) + h) * es + layer * static_cast<double>(c.num_hidden_layers);
}

#ifdef RADIXLM_WITH_CUDA
// Same-run GEMM references for the floor ratios: the gate_up projection's shape ([m, hidden] x
// [2 * intermediate, hidden]^T) through ops::linear with a bf16 weight (cuBLAS, or the GEMV for
// m <= 8) and an FP8 weight (kernels/cuda/fp8_linear.cu), at m = the batch and m = 4096 (peak).
void print_gemm_references(const ModelConfig& c, int64_t batch, Device device) {
  std::mt19937 rng(7);
  const int64_t n = 2 * c.intermediate_size, k = c.hidden_size;
  const Tensor w16 = random_gpu(rng, {n, k}, DType::kBF16);
  const Tensor w8 = w16.to(Device::cpu()).to(DType::kF32).to(DType::kF8E4M3).to(device);
  ops::Fp8Scales scales;
  Tensor ones = Tensor::empty({n}, DType::kF32);
  ones.fill_(1.0);
  scales.weight_scale = ones.to(device);
  const auto stream = static_cast<cudaStream_t>(cuda_stream(device.index));
  for (const int64_t m : {batch, int64_t{4096}}) {
    const Tensor x = random_gpu(rng, {m, k}, DType::kF32);
    const Tensor out = Tensor::empty({m, n}, DType::kF32, device);
    const double t16 = median_seconds(20, 3, stream, [&] { ops::linear(x, w16, std::nullopt, out); });
    const double t8 = median_seconds(20, 3, stream, [&] { ops::linear(x, w8, std::nullopt, out, scales); });
    const double flops = 2.0 * static_cast<double>(m * n * k);
    std::printf("gemm reference m %lld n %lld k %lld: bf16 %.3f ms (%.0f TFLOP/s, weight %.0f GB/s); fp8 %.3f ms "
                "(%.0f TFLOP/s, weight %.0f GB/s)\n",
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), t16 * 1e3,
                flops / t16 / 1e12, 2.0 * static_cast<double>(n * k) / t16 / 1e9, t8 * 1e3, flops / t8 / 1e12,
                static_cast<double>(n * k) / t8 / 1e9);
  }
}
#endif

// Bytes one Qwen3-Next decode step of `batch` tokens reads: every non-expert weight (attention or
// Gated DeltaNet projections, router, shared expert, lm_head) in `dtype`, the experts the step
// routes to (top_k per layer at batch 1; for larger batches the expected number of distinct
// experts under uniform routing, E * (1 - (1 - k/E)^batch)), the batch's embedding rows, the f32
// norms / A_log / dt_bias, and each request's f32 conv + SSM states, read and written.
StatusOr<double> qwen3_next_step_bytes(const ModelConfig& config, int64_t batch, DType dtype) {
  ModelConfig c = config;
  RLM_ASSIGN_OR_RETURN(const Qwen3NextSpec s, parse_qwen3_next_spec(c));
  const double es = bytes_per_element(dtype), h = static_cast<double>(c.hidden_size);
  const double d = static_cast<double>(c.head_dim), hq = static_cast<double>(c.num_attention_heads);
  const double hk = static_cast<double>(c.num_key_value_heads), b = static_cast<double>(batch);
  const double key_dim = static_cast<double>(s.linear_num_key_heads * s.linear_key_head_dim);
  const double value_dim = static_cast<double>(s.linear_num_value_heads * s.linear_value_head_dim);
  const double conv_dim = 2.0 * key_dim + value_dim, hv = static_cast<double>(s.linear_num_value_heads);
  const double e = static_cast<double>(s.num_experts), k = static_cast<double>(s.num_experts_per_tok);
  const double experts_read = e > 0 ? e * (1.0 - std::pow(1.0 - k / e, b)) : 0.0;
  double weights = 0.0, f32 = 0.0, states = 0.0;
  for (size_t l = 0; l < s.is_linear.size(); ++l) {
    f32 += 2.0 * h;  // input / post-attention norms
    if (s.is_linear[l]) {
      weights += h * (conv_dim + value_dim + 2.0 * hv) + value_dim * h +
                 conv_dim * static_cast<double>(s.linear_conv_kernel_dim);
      f32 += 2.0 * hv + static_cast<double>(s.linear_value_head_dim);
      states += b * (conv_dim * static_cast<double>(s.linear_conv_kernel_dim - 1) +
                     hv * static_cast<double>(s.linear_key_head_dim * s.linear_value_head_dim));
    } else {
      weights += h * d * (2.0 * hq + 2.0 * hk) + hq * d * h;
      f32 += 2.0 * d;  // q / k norms
    }
    if (s.is_moe[l]) {
      weights += e * h + experts_read * 3.0 * h * static_cast<double>(s.moe_intermediate_size);
      if (s.shared_expert_intermediate_size > 0) {
        weights += 3.0 * h * static_cast<double>(s.shared_expert_intermediate_size) + h;
      }
    } else {
      weights += 3.0 * h * static_cast<double>(c.intermediate_size);
    }
  }
  weights += static_cast<double>(c.vocab_size) * h + b * h;  // lm_head + the embedding rows
  f32 += h;                                                   // final norm
  return weights * es + f32 * 4.0 + 2.0 * states * 4.0;
}

// Copy bandwidth (bytes read + written per second) of a 1 GiB (256 MiB on the CPU) buffer.
double copy_bandwidth(Device device) {
  const int64_t n = device.is_cuda() ? (int64_t{1} << 30) : (int64_t{1} << 28);
  Tensor a = Tensor::empty({n}, DType::kU8, device), b = Tensor::empty({n}, DType::kU8, device);
  device_memset(a.data_ptr(), device, 1, n);
  std::vector<double> times;
  for (int i = 0; i < 6; ++i) {
    auto t = Clock::now();
    device_memcpy(b.data_ptr(), device, a.data_ptr(), device, n);
    (void)b.slice(0, 0, 1).to(Device::cpu());  // synchronises with the device
    times.push_back(ms_since(t));
  }
  std::sort(times.begin(), times.end());
  return 2.0 * static_cast<double>(n) / (times[times.size() / 2] / 1e3);
}

}  // namespace

int run_one_batch(const EngineArgs& engine, const OneBatchArgs& a) {
  EngineArgs e = engine;
  e.max_running_requests = a.batch_size;
  if (e.context_length == 0) e.context_length = a.input_len + a.output_len;
  if (Status st = e.validate(); !st.is_ok()) return std::fprintf(stderr, "radixlm bench one-batch: %s\n", st.message().c_str()), 2;
  if (e.context_length < a.input_len + a.output_len) {
    std::fprintf(stderr, "radixlm bench one-batch: the context length %lld is below --input-len + --output-len\n",
                 static_cast<long long>(e.context_length));
    return 2;
  }
  const Device device = resolve_device(e.device).value();
  e = e.with_limits_for(hardware_info(device));
  const int64_t step_tokens = e.max_prefill_tokens;  // the memory plan covers a step this large
  auto files = load_engine_files(e, TokenizerUse::kNone);
  if (!files.is_ok()) return std::fprintf(stderr, "radixlm bench one-batch: %s\n", files.status().to_string().c_str()), 1;
  const ModelConfig cfg = files->model.config;
  auto runner = create_runner(e, *files, device);
  if (!runner.is_ok()) return std::fprintf(stderr, "radixlm bench one-batch: %s\n", runner.status().to_string().c_str()), 1;
  ModelRunner& r = **runner;
  const int64_t page_size = e.page_size;
  // Each request gets the pages its input + output tokens fill, not --context-length's (which
  // may be set only to pick the decode kernels' split count, as the server's would).
  const int64_t pages_per_req = (a.input_len + a.output_len + page_size - 1) / page_size;
  if (r.kv_pool().config().num_pages < pages_per_req * a.batch_size) {
    std::fprintf(stderr, "radixlm bench one-batch: the KV pool holds %lld pages but the batch needs %lld\n",
                 static_cast<long long>(r.kv_pool().config().num_pages),
                 static_cast<long long>(pages_per_req * a.batch_size));
    return 1;
  }
  std::mt19937 rng(static_cast<uint32_t>(e.seed));
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab_size) - 1);
  // Request b owns pages [b * pages_per_req, (b + 1) * pages_per_req).
  auto slot = [&](int64_t b, int64_t pos) { return static_cast<int32_t>(b * pages_per_req * page_size + pos); };
  std::vector<int32_t> req_slots;
  for (int64_t b = 0; b < a.batch_size; ++b) req_slots.push_back(r.req_to_token().alloc());
  // Hybrid models (Qwen3-Next): each request's recurrent state lives in a MambaPool slot.
  std::vector<int32_t> mamba_slots(a.batch_size, -1);
  if (MambaPool* pool = r.mamba_pool()) {
    for (auto& m : mamba_slots) m = pool->alloc();
  }
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a.batch_size));
  for (auto& p : prompts) {
    for (int64_t i = 0; i < a.input_len; ++i) p.push_back(tok(rng));
  }
  int64_t eager_mismatches = 0;
  const Sampler sampler(r.future_tokens());
  const std::vector<SampleRow> greedy(static_cast<size_t>(a.batch_size), SampleRow::greedy());
  // Prefill in steps of at most step_tokens tokens, requests split across steps like the server's
  // chunked prefill; a request samples its first token in the step that completes its prompt.
  std::vector<int32_t> next(static_cast<size_t>(a.batch_size), 0);
  int64_t prefill_steps = 0;
#ifdef RADIXLM_WITH_CUDA
  // --profile-prefill: the steps after the first (all of them when there is one).
  const bool profile_prefill = device.is_cuda() && a.profile_prefill;
  if (profile_prefill && a.batch_size * a.input_len <= step_tokens) bench::profiler_range(true);
#endif
  auto t0 = Clock::now();
  for (int64_t b = 0, done = 0; b < a.batch_size;) {
#ifdef RADIXLM_WITH_CUDA
    if (profile_prefill && prefill_steps == 1) bench::profiler_range(true);
#endif
    std::vector<BatchEntry> step;
    std::vector<int64_t> sampled;
    for (int64_t room = step_tokens; room > 0 && b < a.batch_size;) {
      const int64_t take = std::min(room, a.input_len - done);
      BatchEntry e;
      e.req_slot = req_slots[b];
      e.mamba_slot = mamba_slots[b];
      e.prefix_len = static_cast<int32_t>(done);
      e.new_ids.assign(prompts[b].begin() + done, prompts[b].begin() + done + take);
      for (int64_t i = done; i < done + take; ++i) e.new_slots.push_back(slot(b, i));
      done += take;
      room -= take;
      e.skip_logits = done < a.input_len;
      if (!e.skip_logits) sampled.push_back(b);
      step.push_back(std::move(e));
      if (done == a.input_len) {
        ++b;
        done = 0;
      }
    }
    ForwardBatch pb = r.build_batch(ForwardMode::kExtend, step);
    const Tensor logits = r.forward(pb);
    if (!sampled.empty()) {
      const std::vector<int32_t> out =
          sampled_tokens(sampler.sample(logits, std::vector<SampleRow>(sampled.size(), SampleRow::greedy())));
      for (size_t i = 0; i < sampled.size(); ++i) next[sampled[i]] = out[i];
    }
    ++prefill_steps;
  }
#ifdef RADIXLM_WITH_CUDA
  if (profile_prefill) bench::profiler_range(false);
#endif
  r.synchronize();
  const double prefill_ms = ms_since(t0);
  // Decode steps; `inputs[s]` are the tokens fed at step s (recorded on the first pass, replayed on
  // the second so both passes do identical work on identical data).
  std::vector<std::vector<int32_t>> inputs, outputs;
  // RADIXLM_KERNEL_TIMELINE_OUT: where a profiling build writes the last decode step's kernel
  // timeline; any other build, or a run without such a step, says why it writes none.
  const char* timeline = std::getenv("RADIXLM_KERNEL_TIMELINE_OUT");
#ifdef RADIXLM_WITH_CUDA
  if (timeline != nullptr && (!device.is_cuda() || !cuda::timeline_built() || a.output_len < 2)) {
    std::fprintf(stderr, "radixlm bench one-batch: RADIXLM_KERNEL_TIMELINE_OUT ignored: %s\n",
                 !device.is_cuda() ? "the timeline is recorded on CUDA devices only"
                 : !cuda::timeline_built()
                     ? "this build does not record it (configure with -DRADIXLM_KERNEL_TIMELINE=ON)"
                     : "--output-len below 2 runs no decode step");
    timeline = nullptr;
  }
#else
  if (timeline != nullptr) {
    std::fprintf(stderr,
                 "radixlm bench one-batch: RADIXLM_KERNEL_TIMELINE_OUT ignored: a build without CUDA\n");
  }
#endif
  auto decode_pass = [&](bool replay_inputs) {
    std::vector<double> times;
    std::vector<int32_t> cur = next;
    for (int64_t s = 0; s + 1 < a.output_len; ++s) {
      if (replay_inputs) cur = inputs[s];
#ifdef RADIXLM_WITH_CUDA
      // The first pass's steps after the first: the profiler's capture range
      // (tools/kernel_breakdown.sh).
      if (device.is_cuda() && !a.profile_prefill && !replay_inputs && s == 1) bench::profiler_range(true);
#endif
      std::vector<BatchEntry> dec;
      for (int64_t b = 0; b < a.batch_size; ++b) {
        BatchEntry e;
        e.req_slot = req_slots[b];
        e.mamba_slot = mamba_slots[b];
        e.prefix_len = static_cast<int32_t>(a.input_len + s);
        e.new_ids = {cur[b]};
        e.new_slots = {slot(b, a.input_len + s)};
        dec.push_back(std::move(e));
      }
#ifdef RADIXLM_WITH_CUDA
      // A profiling build's kernel timeline of the first pass's last step (tools/timeline.py).
      const bool record = timeline != nullptr && !replay_inputs && s + 2 == a.output_len;
      if (record) cuda::timeline_reset();
#endif
      auto t = Clock::now();
      ForwardBatch db = r.build_batch(ForwardMode::kDecode, dec);
      std::vector<int32_t> out = sampled_tokens(sampler.sample(r.forward(db), greedy));
      times.push_back(ms_since(t));
#ifdef RADIXLM_WITH_CUDA
      if (record) std::printf("kernel timeline: %zu blocks -> %s\n", cuda::timeline_dump(timeline), timeline);
#endif
      if (!replay_inputs) {
        inputs.push_back(cur);
        outputs.push_back(out);
      } else if (out != outputs[s]) {
        ++eager_mismatches;
      }
      cur = std::move(out);
    }
#ifdef RADIXLM_WITH_CUDA
    if (device.is_cuda() && !a.profile_prefill && !replay_inputs && a.output_len > 2)
      bench::profiler_range(false);
#endif
    std::sort(times.begin(), times.end());
    return times.empty() ? 0.0 : times[times.size() / 2];
  };
  const double step_ms = decode_pass(false);
  const bool graphs_on = !r.cuda_graph_batch_sizes().empty();
  // With CUDA graphs, the same steps again eagerly: the reference for the graph speed-up, and a
  // check that both paths give the same greedy tokens.
  double eager_ms = 0.0;
  if (graphs_on && a.output_len > 1) {
    r.set_use_cuda_graph(false);
    eager_ms = decode_pass(true);
    r.set_use_cuda_graph(true);
  }
  const double bw = copy_bandwidth(device);
  const double kv_bytes_per_token = static_cast<double>(r.kv_pool().bytes_per_token());
  const double mid_len = static_cast<double>(a.input_len) + static_cast<double>(a.output_len) / 2.0;
  // Dummy weights are made in bf16 (f32 when the config says so; --dummy-weight-type's blocks for
  // matrices); loaded weights in the config's dtype, a GGUF file's as stored.
  const std::optional<DType> dummy_type = e.dummy_weight_dtype().value();
  const DType wdt = dummy_type ? *dummy_type : cfg.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  const GgufFile* gguf = e.load_format != "dummy" ? files->model.gguf.get() : nullptr;
  // Qwen3-Next reads only the routed experts (and its recurrent states) per step.
  // FP8 projections: --quantization fp8, or a checkpoint that declares its quantization.
  const bool fp8_weights = e.quantization == "fp8" || cfg.raw.contains("quantization_config");
  double weights_read = weight_bytes(cfg, wdt, fp8_weights);
  if (gguf != nullptr) {
    // Every tensor is read once per step (a tied embedding as the lm_head), except an untied embedding.
    weights_read = 0.0;
    const bool untied = gguf->find_tensor("output.weight") != nullptr;
    for (const GgufTensorInfo& t : gguf->tensors()) {
      if (!(untied && t.name == "token_embd.weight")) weights_read += static_cast<double>(t.nbytes);
    }
  }
  if (cfg.architecture == "Qwen3NextForCausalLM") {
    auto bytes = qwen3_next_step_bytes(cfg, a.batch_size, wdt);
    if (!bytes.is_ok()) return std::fprintf(stderr, "radixlm bench one-batch: %s\n", bytes.status().to_string().c_str()), 1;
    weights_read = *bytes;
  }
  const double decode_bytes = weights_read + kv_bytes_per_token * mid_len * static_cast<double>(a.batch_size);
  // The copy's rate counts bytes read plus written; a decode step is a read stream, which runs at
  // about that total rate, so the floor is bytes / copy rate.
  const double floor_ms = decode_bytes / bw * 1e3;
  std::printf("model %s (%s%s, kv %s) on %s (%s), batch %lld, input %lld, output %lld, page size %lld\n",
              cfg.architecture.c_str(), gguf != nullptr ? "gguf" : dtype_name(wdt), fp8_weights ? ", fp8 projections" : "",
              dtype_name(r.kv_pool().config().dtype), device.to_string().c_str(),
              device.is_cpu() ? str(cpu::num_threads(), " threads, ", cpu::cpu_isa_name(cpu::best_cpu_isa())).c_str()
                              : "cuda",
              static_cast<long long>(a.batch_size),
              static_cast<long long>(a.input_len), static_cast<long long>(a.output_len),
              static_cast<long long>(page_size));
  std::printf("prefill: %.2f ms (%.0f tok/s) in %lld steps of <= %lld tokens\n", prefill_ms,
              static_cast<double>(a.batch_size * a.input_len) / (prefill_ms / 1e3),
              static_cast<long long>(prefill_steps), static_cast<long long>(step_tokens));
  const std::vector<int64_t> graph_sizes = r.cuda_graph_batch_sizes();
  std::string graphs = "eager";
  if (!graph_sizes.empty()) {
    const int64_t padded = padded_batch_size(graph_sizes, a.batch_size);
    graphs = padded > 0 ? str("CUDA graph, padded to ", padded) : str("eager (batch > --cuda-graph-max-bs)");
  }
  const size_t num_steps = static_cast<size_t>(std::max<int64_t>(0, a.output_len - 1));
  std::printf("decode step (median of %zu, %s): %.3f ms (%.0f tok/s)\n", num_steps, graphs.c_str(), step_ms,
              static_cast<double>(a.batch_size) / (step_ms / 1e3));
  if (eager_ms > 0.0) {
    std::printf("decode step eager (same steps again, --disable-cuda-graph): %.3f ms; graph speed-up %.2fx; "
                "greedy tokens %s\n",
                eager_ms, eager_ms / step_ms,
                eager_mismatches == 0 ? "identical" : str(eager_mismatches, " steps differ").c_str());
  }
  std::printf("decode floor: %.2f GB read (weights + KV%s) / copy bandwidth %.0f GB/s = %.3f ms; step / floor = %.2f\n",
              decode_bytes / 1e9, cfg.architecture == "Qwen3NextForCausalLM" ? " + routed experts + states" : "",
              bw / 1e9, floor_ms, step_ms / floor_ms);
  if (const std::shared_ptr<TpGroup>& group = r.config().tp_group; group != nullptr) {
    // Each rank reads its shard of the weights (1/tp of them; the small replicated norms aside)
    // and its own KV (bytes_per_token above is already the rank's).
    const double tp = group->size();
    const double rank_ms =
        (weights_read / tp + kv_bytes_per_token * mid_len * static_cast<double>(a.batch_size)) / bw * 1e3;
    std::printf("per-rank floor at --tp %d: %.3f ms; step / per-rank floor = %.2f\n", group->size(), rank_ms,
                step_ms / rank_ms);
    group->steps().bench_collectives();
    const std::vector<AllReduceTiming> t = bench_all_reduce(group->comm(), r.config().device);
    std::printf("%s", format_all_reduce_timings(t, group->size()).c_str());
  }
#ifdef RADIXLM_WITH_CUDA
  if (device.is_cuda() && cfg.architecture != "Qwen3NextForCausalLM") print_gemm_references(cfg, a.batch_size, device);
#endif
  return 0;
}

}  // namespace rlm::bench
