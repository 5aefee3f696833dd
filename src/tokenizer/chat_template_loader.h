// Finds a model's chat template: an explicit file (--chat-template), GGUF metadata
// (tokenizer.chat_template), chat_template.jinja, or tokenizer_config.json's "chat_template"
// (a string, or a list of {name, template} where "default" is used). bos/eos token strings come
// from tokenizer_config.json or, failing that, from the tokenizer's bos/eos ids.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace rlm {

// nullopt (not an error) when the model has no template. A template that does not parse is an
// error naming its source.
StatusOr<std::optional<ChatTemplate>> load_chat_template(const std::string& model_path, const Tokenizer& tokenizer,
                                                         const std::string& override_path = "");

}  // namespace rlm
