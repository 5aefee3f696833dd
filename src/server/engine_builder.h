// Builds a ServingEngine from EngineArgs: the model, its tokenizer and chat template, the
// ModelRunner on the chosen device (KV pool, attention backends, CUDA graphs) and the scheduler
// over it. The one construction path of serve, generate, chat and bench offline.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/engine_args.h"
#include "engine/model_loader.h"
#include "server/serving_engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace rlm {

// What a command needs of the tokenizer: it must load (serve, chat), it is used when present
// (generate: text prompts and output text need it, token ids do not), or it is not loaded at all
// (bench offline counts tokens only).
enum class TokenizerUse { kRequired, kOptional, kNone };

// The files of an engine, loaded before its runner exists so that a command can size its work
// from them first (generate's context length from its prompts, bench offline's prompts from the
// vocabulary).
struct EngineFiles {
  std::string model_path;
  LoadedModel model;
  std::unique_ptr<Tokenizer> tokenizer;       // null when not loaded (see TokenizerUse)
  std::optional<ChatTemplate> chat_template;  // the model's, or --chat-template's; nullopt: none
  std::shared_ptr<TpGroup> tp_group;          // --tp > 1: the group the model is a shard of
};

// Errors name what failed to load; a tokenizer error starts with "tokenizer: ".
// With --tp > 1 it starts the tensor-parallel group first (dist/tp_group.h) and every rank loads
// its shard. On a machine with --node-rank > 0 the process serves nothing: it runs its ranks until
// rank 0 ends the group and exits.
StatusOr<EngineFiles> load_engine_files(const EngineArgs& args, TokenizerUse use);

// The ModelRunner over `files` (its model moved out) with resolved args on `device`; with a
// tensor-parallel group, the other ranks build theirs from the same config.
StatusOr<std::unique_ptr<ModelRunner>> create_runner(const EngineArgs& resolved, EngineFiles& files, Device device);

// The engine over `files` (its scheduler not started). `model_name` is what the engine reports
// (/v1/models); "": the model file or directory name.
StatusOr<std::unique_ptr<ServingEngine>> build_engine(const EngineArgs& args, EngineFiles files,
                                                      std::string model_name = "");

}  // namespace rlm
