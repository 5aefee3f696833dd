#include "engine/engine_args.h"

#include "engine/model_loader.h"
#include "scheduler/scheduler.h"

namespace rlm {

std::string EngineArgs::model_path() const { return model.empty() ? default_model_path() : model; }

std::string EngineArgs::tokenizer_path() const { return tokenizer.empty() ? model_path() : tokenizer; }

namespace {

// The KV pool dtype of --kv-cache-dtype; auto keeps the runner's default (f32).
// "auto" is resolved by runner_config (auto_kv_dtype); here it stands for f32 while validating.
StatusOr<DType> kv_cache_dtype_of(const std::string& name) {
  if (name == "auto" || name == "f32" || name == "float32") return DType::kF32;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f16" || name == "float16") return DType::kF16;
  if (name == "fp8_e4m3" || name == "fp8") return DType::kF8E4M3;
  return invalid_argument(str("--kv-cache-dtype must be auto, f32, bf16, f16 or fp8_e4m3, got '", name, "'"));
}

}  // namespace

DType auto_kv_dtype(const ModelConfig& m, Device dev) {
  return dev.is_cuda() && (m.dtype == DType::kBF16 || m.dtype == DType::kF16) ? m.dtype : DType::kF32;
}

LoadOptions EngineArgs::load_options() const {
  LoadOptions lo;
  lo.load_format = load_format;
  lo.dummy_seed = seed;
  lo.quantization = quantization;
  // validate() rejects a name that is not a block type.
  if (auto t = dummy_weight_dtype(); t.is_ok()) lo.dummy_weight_type = *t;
  return lo;
}

TpOptions EngineArgs::tp_options() const {
  TpOptions o;
  o.tp = tp;
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.dist_init_addr = dist_init_addr;
  o.custom_all_reduce = !disable_custom_all_reduce;
  return o;
}

Status EngineArgs::validate() const {
  RLM_RETURN_IF_ERROR(resolve_device(device).status());
  RLM_RETURN_IF_ERROR(tp_options().validate());
  RLM_RETURN_IF_ERROR(kv_cache_dtype_of(kv_cache_dtype).status());
  if (!quantization.empty() && quantization != "fp8") {
    return invalid_argument(str("--quantization must be fp8, got '", quantization, "'"));
  }
  if (!parse_cascade_mode(cascade_attention).is_ok()) {
    return invalid_argument(str("--cascade-attention must be auto, on or off, got '", cascade_attention, "'"));
  }
  if (page_size < 1) return invalid_argument(str("--page-size must be at least 1, got ", page_size));
  if (max_running_requests < 0) {
    return invalid_argument(
        str("the running-request limit must be at least 1 (0: by the hardware), got ", max_running_requests));
  }
  if (context_length < 0) return invalid_argument(str("the context length must not be negative, got ", context_length));
  if (max_total_tokens < 0) return invalid_argument(str("--max-total-tokens must not be negative, got ", max_total_tokens));
  if (max_mamba_cache_size < 0) {
    return invalid_argument(str("--max-mamba-cache-size must not be negative, got ", max_mamba_cache_size));
  }
  if (!(mem_fraction_static > 0.0 && mem_fraction_static < 1.0)) {
    return invalid_argument(str("--mem-fraction-static must be in (0, 1), got ", mem_fraction_static));
  }
  if (cuda_graph_max_bs < 0) {
    return invalid_argument(str("--cuda-graph-max-bs must be at least 1 (0: by GPU memory), got ", cuda_graph_max_bs));
  }
  if (chunked_prefill_size < 0 || max_prefill_tokens < 0) {
    return invalid_argument("--chunked-prefill-size and --max-prefill-tokens must be at least 1 (0: by the hardware)");
  }
  if (!parse_schedule_policy(schedule_policy).is_ok()) {
    return invalid_argument(str("--schedule-policy must be fcfs or lpm, got '", schedule_policy, "'"));
  }
  if (!parse_cache_kind(cache).is_ok()) return invalid_argument(str("--cache must be radix or naive, got '", cache, "'"));
  RLM_RETURN_IF_ERROR(dummy_weight_dtype().status());
  if (threads < 0) return invalid_argument(str("--threads must not be negative, got ", threads));
  if (max_queued_requests < 1) {
    return invalid_argument(str("--max-queued-requests must be at least 1, got ", max_queued_requests));
  }
  return Status::ok();
}

StatusOr<std::optional<DType>> EngineArgs::dummy_weight_dtype() const {
  if (dummy_weight_type.empty()) return std::optional<DType>();
  auto t = parse_dtype(dummy_weight_type);
  if (!t.is_ok() || !is_quantized(*t)) {
    return invalid_argument(str("--dummy-weight-type takes a GGUF block type (q4_0, q8_0, q4_k, q6_k, ...), got '",
                                dummy_weight_type, "'"));
  }
  if (load_format != "dummy") return invalid_argument("--dummy-weight-type needs --load-format dummy");
  return std::optional<DType>(*t);
}

EngineArgs EngineArgs::with_limits_for(const HardwareInfo& hw) const {
  ServingLimits given;
  given.max_running_requests = max_running_requests;
  given.chunked_prefill_size = chunked_prefill_size;
  given.max_prefill_tokens = max_prefill_tokens;
  given.mixed_prefill_tokens = mixed_prefill_tokens;
  given.cuda_graph_max_bs = cuda_graph_max_bs;
  const ServingLimits l = default_serving_limits(hw, given);
  EngineArgs out = *this;
  out.max_running_requests = l.max_running_requests;
  out.chunked_prefill_size = l.chunked_prefill_size;
  out.max_prefill_tokens = l.max_prefill_tokens;
  out.mixed_prefill_tokens = l.mixed_prefill_tokens;
  out.cuda_graph_max_bs = l.cuda_graph_max_bs;
  return out;
}

int64_t EngineArgs::context_len(const ModelConfig& m) const {
  return context_length > 0 ? context_length : m.max_position_embeddings;
}

ModelRunnerConfig EngineArgs::runner_config(const ModelConfig& m, Device dev) const {
  ModelRunnerConfig rc;
  rc.device = dev;
  rc.attention_backend = attention_backend.empty() ? default_attention_backend(dev) : attention_backend;
  rc.prefill_attention_backend = prefill_attention_backend;
  rc.decode_attention_backend = decode_attention_backend;
  rc.page_size = page_size;
  StatusOr<DType> kv_dtype = kv_cache_dtype_of(kv_cache_dtype);
  RLM_CHECK(kv_dtype.is_ok()) << kv_dtype.status().to_string() << " (EngineArgs::validate() was not called)";
  rc.kv_dtype = kv_cache_dtype == "auto" ? auto_kv_dtype(m, dev) : *kv_dtype;
  rc.max_requests = max_running_requests;
  rc.max_context_len = context_len(m);
  rc.mamba_slots = max_mamba_cache_size;
  rc.cuda_graph = !disable_cuda_graph;
  rc.cuda_graph_max_bs = cuda_graph_max_bs;
  rc.pdl = !disable_pdl;
  if (max_prefill_tokens > 0) rc.max_num_tokens = max_prefill_tokens;  // the largest step the profile plans for
  StatusOr<CascadeMode> cascade = parse_cascade_mode(cascade_attention);
  RLM_CHECK(cascade.is_ok()) << cascade.status().to_string() << " (EngineArgs::validate() was not called)";
  rc.cascade_attention = *cascade;
  const bool from_memory = max_total_tokens == 0 && dev.is_cuda() && kv_from_memory;
  const int64_t tokens = max_total_tokens > 0 ? max_total_tokens : (from_memory ? 0 : cpu_total_tokens);
  // num_pages 0 without a memory fraction: the runner makes room for max_requests full contexts.
  rc.num_pages = tokens > 0 ? (tokens + page_size - 1) / page_size : 0;
  rc.mem_fraction_static = from_memory ? mem_fraction_static : 0.0;
  return rc;
}

SchedulerConfig EngineArgs::scheduler_config(const ModelConfig& m) const {
  SchedulerConfig sc;
  sc.max_running_requests = max_running_requests;
  sc.chunked_prefill_size = chunked_prefill_size;
  sc.max_prefill_tokens = max_prefill_tokens;
  sc.enable_mixed_chunk = enable_mixed_chunk;
  sc.mixed_prefill_tokens = mixed_prefill_tokens;
  StatusOr<SchedulePolicy> policy = parse_schedule_policy(schedule_policy);
  StatusOr<CacheKind> kind = parse_cache_kind(cache);
  RLM_CHECK(policy.is_ok() && kind.is_ok()) << "EngineArgs::validate() was not called";
  sc.policy = *policy;
  sc.cache = *kind;
  sc.max_context_len = context_len(m);
  sc.max_queued_requests = max_queued_requests;
  sc.overlap_schedule = !disable_overlap_schedule;
  sc.check_integrity_when_idle = check_integrity_when_idle;
  return sc;
}

std::string EngineArgs::kv_default_text() const {
  const std::string cpu = cpu_total_tokens > 0 ? std::to_string(cpu_total_tokens)
                                               : std::string("room for every running request at the full context");
  return kv_from_memory ? str("default: from --mem-fraction-static on CUDA, ", cpu, " on the CPU")
                        : str("0: ", cpu);
}

}  // namespace rlm
