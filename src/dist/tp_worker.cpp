#include "dist/tp_worker.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "kernels/cpu/thread_pool.h"

namespace rlm {

namespace {

using nlohmann::json;

void broadcast_json(TpGroup& group, const json& j) {
  const std::string text = j.dump();
  std::vector<uint8_t> bytes(text.begin(), text.end());
  group.control().broadcast(bytes);
}

json receive_json(TpGroup& group) {
  std::vector<uint8_t> bytes;
  group.control().broadcast(bytes);
  return json::parse(bytes.begin(), bytes.end());
}

json runner_config_json(const ModelRunnerConfig& c) {
  return {{"attention_backend", c.attention_backend},
          {"prefill_attention_backend", c.prefill_attention_backend},
          {"decode_attention_backend", c.decode_attention_backend},
          {"page_size", c.page_size},
          {"num_pages", c.num_pages},
          {"max_requests", c.max_requests},
          {"max_context_len", c.max_context_len},
          {"kv_dtype", dtype_name(c.kv_dtype)},
          {"mamba_slots", c.mamba_slots},
          {"mem_fraction_static", c.mem_fraction_static},
          {"max_num_tokens", c.max_num_tokens},
          {"cuda_graph", c.cuda_graph},
          {"cuda_graph_max_bs", c.cuda_graph_max_bs},
          {"pdl", c.pdl},
          {"cascade_attention", cascade_mode_name(c.cascade_attention)}};
}

StatusOr<ModelRunnerConfig> runner_config_from_json(const json& j) {
  ModelRunnerConfig c;
  c.attention_backend = j.at("attention_backend").get<std::string>();
  c.prefill_attention_backend = j.at("prefill_attention_backend").get<std::string>();
  c.decode_attention_backend = j.at("decode_attention_backend").get<std::string>();
  c.page_size = j.at("page_size").get<int64_t>();
  c.num_pages = j.at("num_pages").get<int64_t>();
  c.max_requests = j.at("max_requests").get<int64_t>();
  c.max_context_len = j.at("max_context_len").get<int64_t>();
  RLM_ASSIGN_OR_RETURN(c.kv_dtype, parse_dtype(j.at("kv_dtype").get<std::string>()));
  c.mamba_slots = j.at("mamba_slots").get<int64_t>();
  c.mem_fraction_static = j.at("mem_fraction_static").get<double>();
  c.max_num_tokens = j.at("max_num_tokens").get<int64_t>();
  c.cuda_graph = j.at("cuda_graph").get<bool>();
  c.cuda_graph_max_bs = j.at("cuda_graph_max_bs").get<int64_t>();
  c.pdl = j.at("pdl").get<bool>();
  RLM_ASSIGN_OR_RETURN(c.cascade_attention, parse_cascade_mode(j.at("cascade_attention").get<std::string>()));
  return c;
}

Status run_worker(const TpOptions& options, int rank) {
  RLM_ASSIGN_OR_RETURN(std::shared_ptr<TpGroup> group, TpGroup::join(options, rank));
  const json load = receive_json(*group);
  Device root;
  if (!parse_device(load.at("device").get<std::string>(), &root)) return internal_error("bad device from rank 0");
  const Device device = rank_device(root, rank, options);
  if (const int threads = load.at("threads").get<int>(); threads > 0) cpu::set_num_threads(threads);
  RLM_RETURN_IF_ERROR(group->init_communicator(device, load.at("one_shot_all_reduce").get<bool>()));
  LoadOptions lo;
  lo.load_format = load.at("load_format").get<std::string>();
  lo.dummy_seed = load.at("dummy_seed").get<uint64_t>();
  if (const std::string t = load.at("dummy_weight_type").get<std::string>(); !t.empty()) {
    RLM_ASSIGN_OR_RETURN(lo.dummy_weight_type, parse_dtype(t));
  }
  lo.gguf_keep_quantized = load.at("gguf_keep_quantized").get<bool>();
  lo.quantization = load.at("quantization").get<std::string>();
  lo.tp = group->shard();
  RLM_ASSIGN_OR_RETURN(LoadedModel loaded, load_model(load.at("model_path").get<std::string>(), lo));
  RLM_ASSIGN_OR_RETURN(ModelRunnerConfig rc, runner_config_from_json(receive_json(*group)));
  rc.device = device;
  rc.tp_group = group;
  RLM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, ModelRunner::create(std::move(loaded.model), rc));
  run_step_receiver(group->control(), *runner);
  return Status::ok();
}

}  // namespace

void send_worker_load(TpGroup& group, const std::string& model_path, const LoadOptions& options,
                      Device root_device, int threads, bool one_shot) {
  broadcast_json(
      group, {{"model_path", model_path},
              {"load_format", options.load_format},
              {"dummy_seed", options.dummy_seed},
              {"dummy_weight_type", options.dummy_weight_type ? dtype_name(*options.dummy_weight_type) : ""},
              {"gguf_keep_quantized", options.gguf_keep_quantized},
              {"quantization", options.quantization},
              {"device", root_device.to_string()},
              {"threads", threads},
              {"one_shot_all_reduce", one_shot}});
}

void send_worker_runner(TpGroup& group, const ModelRunnerConfig& config) {
  broadcast_json(group, runner_config_json(config));
}

int run_tp_worker(const TpOptions& options, int rank) {
  try {
    const Status st = run_worker(options, rank);
    if (!st.is_ok()) {
      std::fprintf(stderr, "radixlm tp-worker (rank %d): %s\n", rank, st.to_string().c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "radixlm tp-worker (rank %d): %s\n", rank, e.what());
    return 1;
  }
  return 0;
}

}  // namespace rlm
