#include "server/engine_builder.h"

#include <cstdlib>
#include <filesystem>

#include "dist/tp_worker.h"

#include "kernels/cpu/thread_pool.h"
#include "tokenizer/chat_template_loader.h"

namespace rlm {

StatusOr<EngineFiles> load_engine_files(const EngineArgs& args, TokenizerUse use) {
  if (args.threads > 0) cpu::set_num_threads(args.threads);  // process-wide: the CPU kernels and OpenBLAS
  EngineFiles files;
  files.model_path = args.model_path();
  LoadOptions load = args.load_options();
  if (args.tp > 1) {
    const TpOptions tp = args.tp_options();
    RLM_RETURN_IF_ERROR(tp.validate());
    if (args.node_rank > 0) std::exit(run_tp_worker(tp, args.node_rank * tp.ranks_per_node()));
    RLM_ASSIGN_OR_RETURN(const Device device, resolve_device(args.device));
    RLM_ASSIGN_OR_RETURN(files.tp_group, TpGroup::start(tp));
    const bool one_shot = tp.custom_all_reduce && tp.nnodes == 1;
    send_worker_load(*files.tp_group, files.model_path, load, device, args.threads, one_shot);
    RLM_RETURN_IF_ERROR(files.tp_group->init_communicator(rank_device(device, 0, tp), one_shot));
    load.tp = files.tp_group->shard();
  }
  RLM_ASSIGN_OR_RETURN(files.model, load_model(files.model_path, load));
  if (use == TokenizerUse::kNone) return files;
  // Without an explicit --tokenizer, a model without one (the tiny test models) is fine when optional.
  StatusOr<std::unique_ptr<Tokenizer>> tok = load_tokenizer(args.tokenizer_path());
  if (!tok.is_ok()) {
    if (use == TokenizerUse::kOptional && args.tokenizer.empty()) return files;
    return Status(tok.status().code(), "tokenizer: " + tok.status().message());
  }
  files.tokenizer = std::move(tok).value();
  RLM_ASSIGN_OR_RETURN(files.chat_template,
                       load_chat_template(args.tokenizer_path(), *files.tokenizer, args.chat_template));
  return files;
}

StatusOr<std::unique_ptr<ModelRunner>> create_runner(const EngineArgs& resolved, EngineFiles& files, Device device) {
  ModelRunnerConfig rc = resolved.runner_config(files.model.config, device);
  if (files.tp_group != nullptr) {
    send_worker_runner(*files.tp_group, rc);
    rc.tp_group = files.tp_group;
  }
  return ModelRunner::create(std::move(files.model.model), rc);
}

StatusOr<std::unique_ptr<ServingEngine>> build_engine(const EngineArgs& args, EngineFiles files,
                                                      std::string model_name) {
  RLM_RETURN_IF_ERROR(args.validate());
  RLM_ASSIGN_OR_RETURN(const Device device, resolve_device(args.device));
  const ModelConfig config = files.model.config;
  const EngineArgs resolved = args.with_limits_for(hardware_info(device));
  RLM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, create_runner(resolved, files, device));
  SchedulerConfig sc = resolved.scheduler_config(config);
  if (args.max_running_requests == 0) {  // not given: the hardware's cap, lowered to what the KV pool holds
    sc.max_running_requests = running_requests_for_kv(runner->kv_pool().num_slots(), sc.max_running_requests);
  }
  if (model_name.empty()) model_name = std::filesystem::path(files.model_path).filename().string();
  return std::make_unique<ServingEngine>(std::move(model_name), std::move(runner), std::move(files.tokenizer),
                                         std::move(files.chat_template), sc);
}

}  // namespace rlm
