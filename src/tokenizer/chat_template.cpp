#include "tokenizer/chat_template.h"

namespace rlm {
namespace {

using jinja::Value;

// transformers 5 `_alias_reasoning_fields`: a message carrying reasoning under any of its names
// becomes {"thinking": r, **message, "reasoning_content": r}.
Value alias_reasoning(const Value& message) {
  static const char* kFields[] = {"reasoning_content", "thinking", "reasoning"};
  const Value* reasoning = nullptr;
  for (const char* f : kFields) {
    const Value* v = message.dict_data().find(f);
    if (v && !v->is_none()) {
      reasoning = v;
      break;
    }
  }
  if (!reasoning) return message;
  Value out = Value::dict({{"thinking", *reasoning}});
  for (const auto& [k, v] : message.dict_data().items) out.mutable_dict_data().set(k, v);
  out.mutable_dict_data().set("reasoning_content", *reasoning);
  return out;
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::parse(std::string source, std::string bos_token, std::string eos_token) {
  StatusOr<jinja::Template> t = jinja::Template::parse(source);
  if (!t.is_ok()) return Status(t.status().code(), "chat template: " + t.status().message());
  return ChatTemplate(std::move(source), std::move(t).value(), std::move(bos_token), std::move(eos_token));
}

StatusOr<ChatTemplate> ChatTemplate::from_tokenizer_config(const nlohmann::json& config, const std::string& name) {
  if (!config.is_object()) return invalid_argument("tokenizer_config must be a JSON object");
  auto token = [&](const char* key) -> StatusOr<std::string> {
    if (!config.contains(key) || config[key].is_null()) return std::string();
    const auto& t = config[key];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_object() && t.contains("content") && t["content"].is_string()) return t["content"].get<std::string>();
    return invalid_argument(std::string("tokenizer_config: ") + key + " must be a string or {\"content\": ...}");
  };
  if (!config.contains("chat_template") || config["chat_template"].is_null()) {
    return not_found("tokenizer_config has no chat_template");
  }
  const auto& ct = config["chat_template"];
  std::string source;
  const std::string wanted = name.empty() ? "default" : name;
  if (ct.is_string()) {
    if (!name.empty() && name != "default") return not_found("tokenizer_config has no chat template named '" + name + "'");
    source = ct.get<std::string>();
  } else if (ct.is_array()) {
    bool found = false;
    for (const auto& entry : ct) {
      if (entry.is_object() && entry.contains("name") && entry["name"] == wanted && entry.contains("template") &&
          entry["template"].is_string()) {
        source = entry["template"].get<std::string>();
        found = true;
        break;
      }
    }
    if (!found) return not_found("tokenizer_config has no chat template named '" + wanted + "'");
  } else {
    return invalid_argument("tokenizer_config: chat_template must be a string or a list of {name, template}");
  }
  StatusOr<std::string> bos = token("bos_token");
  if (!bos.is_ok()) return bos.status();
  StatusOr<std::string> eos = token("eos_token");
  if (!eos.is_ok()) return eos.status();
  return parse(std::move(source), std::move(bos).value(), std::move(eos).value());
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                           const nlohmann::json& tools, const nlohmann::json& extra_context) const {
  try {
    return render_values(jinja::from_json(messages), add_generation_prompt, jinja::from_json(tools),
                         jinja::from_json(extra_context));
  } catch (const jinja::RenderError& e) {
    return invalid_argument(std::string("chat template input: ") + e.what());
  }
}

StatusOr<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                           const nlohmann::ordered_json& tools,
                                           const nlohmann::ordered_json& extra_context) const {
  try {
    return render_values(jinja::from_json(messages), add_generation_prompt, jinja::from_json(tools),
                         jinja::from_json(extra_context));
  } catch (const jinja::RenderError& e) {
    return invalid_argument(std::string("chat template input: ") + e.what());
  }
}

StatusOr<std::string> ChatTemplate::render_values(const Value& messages, bool add_generation_prompt,
                                                  const Value& tools, const Value& extra_context) const {
  if (!messages.is_list()) return invalid_argument("chat template: messages must be an array");
  std::vector<Value> chat;
  for (const Value& m : messages.items()) {
    if (!m.is_dict()) return invalid_argument("chat template: every message must be an object, got " + jinja::repr(m));
    chat.push_back(alias_reasoning(m));
  }
  if (!tools.is_none() && !tools.is_list()) return invalid_argument("chat template: tools must be an array or null");
  if (!extra_context.is_none() && !extra_context.is_dict()) {
    return invalid_argument("chat template: extra context must be an object");
  }
  Value context = Value::dict();
  auto& vars = context.mutable_dict_data();
  if (!bos_token_.empty()) vars.set("bos_token", Value(bos_token_));
  if (!eos_token_.empty()) vars.set("eos_token", Value(eos_token_));
  if (extra_context.is_dict()) {
    for (const auto& [k, v] : extra_context.dict_data().items) {
      const std::string name = jinja::to_str(k);
      if (name == "messages" || name == "tools" || name == "documents" || name == "add_generation_prompt") {
        return invalid_argument("chat template: extra context may not set '" + name + "'");
      }
      vars.set(k, v);
    }
  }
  vars.set("messages", Value::list(std::move(chat)));
  vars.set("tools", tools);
  vars.set("documents", Value::none());
  vars.set("add_generation_prompt", Value(add_generation_prompt));
  return template_->render(context, options_);
}

}  // namespace rlm
