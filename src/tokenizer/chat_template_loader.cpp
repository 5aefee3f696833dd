#include "tokenizer/chat_template_loader.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json.h"
#include "formats/gguf.h"

namespace rlm {

namespace {

std::optional<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string special_token_string(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return "";
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

std::string token_string(const Tokenizer& tok, std::optional<int32_t> id) {
  if (!id) return "";
  return tok.id_to_token(*id).value_or("");
}

}  // namespace

StatusOr<std::optional<ChatTemplate>> load_chat_template(const std::string& model_path, const Tokenizer& tokenizer,
                                                         const std::string& override_path) {
  namespace fs = std::filesystem;
  std::optional<std::string> source;
  std::string where;
  std::string bos = token_string(tokenizer, tokenizer.bos_id());
  std::string eos = token_string(tokenizer, tokenizer.eos_id());
  const fs::path path(model_path);
  if (!override_path.empty()) {
    source = read_file(override_path);
    if (!source) return not_found(str("cannot read chat template file '", override_path, "'"));
    where = override_path;
  }
  if (fs::is_regular_file(path) && path.extension() == ".gguf") {
    if (!source) {
      RLM_ASSIGN_OR_RETURN(auto gguf, GgufFile::open(model_path));
      source = gguf->get_string("tokenizer.chat_template");
      where = model_path + " (tokenizer.chat_template)";
    }
  } else if (fs::is_directory(path)) {
    const fs::path cfg_path = path / "tokenizer_config.json";
    nlohmann::json cfg;
    if (auto text = read_file(cfg_path)) {
      StatusOr<nlohmann::json> parsed = parse_json(*text, kFileJsonLimits);
      if (!parsed.is_ok() || !parsed->is_object()) {
        return invalid_argument(str(cfg_path.string(), " is not a JSON object",
                                    parsed.is_ok() ? "" : ": " + parsed.status().message()));
      }
      cfg = std::move(parsed).value();
      if (auto b = special_token_string(cfg, "bos_token"); !b.empty()) bos = b;
      if (auto e = special_token_string(cfg, "eos_token"); !e.empty()) eos = e;
    }
    if (!source) {
      if (auto jinja = read_file(path / "chat_template.jinja")) {
        source = jinja;
        where = (path / "chat_template.jinja").string();
      } else if (cfg.is_object() && cfg.contains("chat_template")) {
        const auto& ct = cfg["chat_template"];
        where = cfg_path.string() + " (chat_template)";
        if (ct.is_string()) {
          source = ct.get<std::string>();
        } else if (ct.is_array()) {
          for (const auto& e : ct) {
            if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
                e["template"].is_string()) {
              source = e["template"].get<std::string>();
            }
          }
        }
        if (!source) return invalid_argument(str(where, " is neither a string nor a list with a 'default' entry"));
      }
    }
  }
  if (!source) return std::optional<ChatTemplate>();
  auto tmpl = ChatTemplate::parse(*source, bos, eos);
  if (!tmpl.is_ok()) return Status(tmpl.status().code(), str("chat template from ", where, ": ", tmpl.status().message()));
  return std::optional<ChatTemplate>(std::move(tmpl).value());
}

}  // namespace rlm
