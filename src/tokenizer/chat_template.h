// A Hugging Face `chat_template` (tokenizer_config.json or GGUF tokenizer.chat_template) turned
// into a prompt string exactly as transformers' apply_chat_template(..., tokenize=False) does:
// variables messages, tools, documents (None), add_generation_prompt, bos_token, eos_token, plus
// caller extras such as enable_thinking; reasoning fields aliased like transformers 5
// (`reasoning_content` / `thinking` / `reasoning`).
//
// Key order matters (tojson of tool schemas prints keys in their order): pass
// nlohmann::ordered_json parsed from the request to keep it; nlohmann::json sorts keys.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "jinja/template.h"

namespace rlm {

class ChatTemplate {
 public:
  // Parses `source`; syntax errors and unsupported constructs fail here with line and column.
  // An empty bos_token / eos_token leaves that variable undefined, as transformers does for a
  // tokenizer without that special token (e.g. Qwen has no bos_token).
  static StatusOr<ChatTemplate> parse(std::string source, std::string bos_token, std::string eos_token);

  // From a Hugging Face tokenizer_config.json: `chat_template` is a string or a list of
  // {"name", "template"} (pick `name`, "default" when empty); bos_token / eos_token are strings or
  // AddedToken objects {"content": ...} or null. kNotFound when there is no such template.
  static StatusOr<ChatTemplate> from_tokenizer_config(const nlohmann::json& config, const std::string& name = "");

  // messages: array of message objects; tools: null or an array of tool schemas; extra_context:
  // null or an object of additional template variables (may override bos_token/eos_token, must not
  // name messages/tools/documents/add_generation_prompt). A template's raise_exception(msg) comes
  // back as kInvalidArgument with exactly `msg`.
  StatusOr<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                               const nlohmann::json& tools = nullptr,
                               const nlohmann::json& extra_context = {}) const;
  StatusOr<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& tools = nullptr,
                               const nlohmann::ordered_json& extra_context = {}) const;

  // Replaces the clock behind strftime_now() (tests pin a date; default is local time).
  void set_clock(std::function<std::tm()> now) { options_.now = std::move(now); }

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, jinja::Template tmpl, std::string bos, std::string eos)
      : source_(std::move(source)), template_(std::make_shared<jinja::Template>(std::move(tmpl))),
        bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}

  StatusOr<std::string> render_values(const jinja::Value& messages, bool add_generation_prompt,
                                      const jinja::Value& tools, const jinja::Value& extra_context) const;

  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  std::string bos_token_;
  std::string eos_token_;
  jinja::RenderOptions options_;
};

}  // namespace rlm
