#include "server/engine_builder.h"

#include <filesystem>

#include "kernels/cpu/thread_pool.h"
#include "tokenizer/chat_template_loader.h"

namespace rlm {

StatusOr<EngineFiles> load_engine_files(const EngineArgs& args, TokenizerUse use) {
  if (args.threads > 0) cpu::set_num_threads(args.threads);  // process-wide: the CPU kernels and OpenBLAS
  EngineFiles files;
  files.model_path = args.model_path();
  RLM_ASSIGN_OR_RETURN(files.model, load_model(files.model_path, args.load_options()));
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

StatusOr<std::unique_ptr<ServingEngine>> build_engine(const EngineArgs& args, EngineFiles files,
                                                      std::string model_name) {
  RLM_RETURN_IF_ERROR(args.validate());
  RLM_ASSIGN_OR_RETURN(const Device device, resolve_device(args.device));
  const ModelConfig config = files.model.config;
  const EngineArgs resolved = args.with_limits_for(hardware_info(device));
  RLM_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner,
                       ModelRunner::create(std::move(files.model.model), resolved.runner_config(config, device)));
  SchedulerConfig sc = resolved.scheduler_config(config);
  if (args.max_running_requests == 0) {  // not given: the hardware's cap, lowered to what the KV pool holds
    sc.max_running_requests = running_requests_for_kv(runner->kv_pool().num_slots(), sc.max_running_requests);
  }
  if (model_name.empty()) model_name = std::filesystem::path(files.model_path).filename().string();
  return std::make_unique<ServingEngine>(std::move(model_name), std::move(runner), std::move(files.tokenizer),
                                         std::move(files.chat_template), sc);
}

}  // namespace rlm
