#include "tokenizer/hf_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/utf8.h"

namespace rlm {
namespace {

using nlohmann::json;

struct SpecialIds {
  std::vector<int32_t> prefix, suffix;
};

// The ids a post-processor adds around a single sequence.
StatusOr<SpecialIds> parse_post_processor(const json& spec) {
  SpecialIds ids;
  if (spec.is_null()) return ids;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return invalid_argument("tokenizer.json post_processor must be an object with a string 'type'");
  }
  const std::string type = spec["type"];
  if (type == "ByteLevel") return ids;  // only adjusts offsets
  if (type == "TemplateProcessing") {
    if (!spec.contains("single") || !spec["single"].is_array()) {
      return invalid_argument("TemplateProcessing needs a 'single' array");
    }
    const json& specials = spec.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const json& piece : spec["single"]) {
      if (piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id")) {
        return invalid_argument("TemplateProcessing piece is neither Sequence nor SpecialToken");
      }
      const std::string name = piece["SpecialToken"]["id"];
      if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array()) {
        return invalid_argument("TemplateProcessing special token '" + name + "' has no ids");
      }
      auto& dst = seen_sequence ? ids.suffix : ids.prefix;
      for (const json& id : specials[name]["ids"]) dst.push_back(id.get<int32_t>());
    }
    return ids;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    if (!spec.contains("cls") || !spec.contains("sep")) return invalid_argument(type + " needs 'cls' and 'sep'");
    ids.prefix.push_back(spec["cls"][1].get<int32_t>());
    ids.suffix.push_back(spec["sep"][1].get<int32_t>());
    return ids;
  }
  if (type == "Sequence") {
    if (!spec.contains("processors") || !spec["processors"].is_array()) {
      return invalid_argument("Sequence post_processor needs a 'processors' array");
    }
    for (const json& p : spec["processors"]) {  // later processors wrap the earlier output
      RLM_ASSIGN_OR_RETURN(SpecialIds inner, parse_post_processor(p));
      inner.prefix.insert(inner.prefix.end(), ids.prefix.begin(), ids.prefix.end());
      ids.prefix = std::move(inner.prefix);
      ids.suffix.insert(ids.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return ids;
  }
  return unimplemented("unsupported tokenizer.json post_processor type '" + type + "'");
}

// A tokenizer_config.json token entry: a string or {"content": "..."}.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

StatusOr<json> read_json(const std::string& path) {
  StatusOr<json> j = read_json_file(path);
  if (!j.is_ok() && j.status().code() != StatusCode::kNotFound) {
    return invalid_argument("malformed JSON in " + j.status().message());
  }
  return j;
}

}  // namespace

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::from_json(const json& tj, const json& config) {
  if (!tj.is_object()) return invalid_argument("tokenizer.json must hold a JSON object");
  if (!tj.contains("model")) return invalid_argument("tokenizer.json has no 'model'");
  std::unique_ptr<HfTokenizer> t(new HfTokenizer());
  RLM_ASSIGN_OR_RETURN(t->model_, make_token_model(tj["model"]));
  RLM_ASSIGN_OR_RETURN(t->added_, AddedVocabulary::from_json(tj.value("added_tokens", json())));
  RLM_ASSIGN_OR_RETURN(t->normalizer_, make_normalizer(tj.value("normalizer", json())));
  RLM_ASSIGN_OR_RETURN(t->pre_tokenizer_, make_pre_tokenizer(tj.value("pre_tokenizer", json())));
  RLM_ASSIGN_OR_RETURN(t->decoder_, make_decoder(tj.value("decoder", json())));
  RLM_ASSIGN_OR_RETURN(SpecialIds special, parse_post_processor(tj.value("post_processor", json())));
  t->prefix_ids_ = std::move(special.prefix);
  t->suffix_ids_ = std::move(special.suffix);

  if (auto bos = config_token(config, "bos_token")) t->bos_id_ = t->token_to_id(*bos);
  if (auto eos = config_token(config, "eos_token")) t->eos_id_ = t->token_to_id(*eos);
  // add_bos_token / add_eos_token where the post-processor does not already add them.
  if (config.is_object() && config.value("add_bos_token", false) == true && t->bos_id_ &&
      (t->prefix_ids_.empty() || t->prefix_ids_.front() != *t->bos_id_)) {
    t->prefix_ids_.insert(t->prefix_ids_.begin(), *t->bos_id_);
  }
  if (config.is_object() && config.value("add_eos_token", false) == true && t->eos_id_ &&
      (t->suffix_ids_.empty() || t->suffix_ids_.back() != *t->eos_id_)) {
    t->suffix_ids_.push_back(*t->eos_id_);
  }
  return t;
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::load(const std::string& path) {
  RLM_ASSIGN_OR_RETURN(json tj, read_json(path));
  json config;
  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    RLM_ASSIGN_OR_RETURN(config, read_json(config_path.string()));
  }
  // from_json checks the fields it needs; a value of an unexpected JSON type elsewhere (e.g. a
  // number where a flag belongs) surfaces as nlohmann's type_error, reported as a bad file.
  try {
    auto t = from_json(tj, config);
    if (!t.is_ok()) return Status(t.status().code(), path + ": " + t.status().message());
    return t;
  } catch (const json::exception& e) {
    return invalid_argument(path + ": unexpected value: " + e.what());
  }
}

void HfTokenizer::encode_piece(const std::string& text, bool first_segment, bool allow_special,
                               std::vector<int32_t>& out) const {
  const std::string normalized = normalizer_ ? normalizer_->normalize(text) : text;
  std::vector<AddedVocabulary::Segment> segments;
  if (added_.has_normalized_tokens()) {
    segments = added_.split(normalized, /*normalized=*/true, allow_special);
  } else if (!normalized.empty()) {
    segments.push_back({normalized, -1});
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].id >= 0) {
      out.push_back(segments[i].id);
      continue;
    }
    std::vector<std::string> words{segments[i].text};
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(words, first_segment && i == 0);
    for (const std::string& w : words) model_->tokenize(w, out);
  }
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens, bool allow_special) const {
  const std::string clean = utf8::sanitize(text);
  std::vector<int32_t> out;
  if (add_special_tokens) out = prefix_ids_;
  const auto segments = added_.split(clean, /*normalized=*/false, allow_special);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].id >= 0) out.push_back(segments[i].id);
    else encode_piece(segments[i].text, i == 0, allow_special, out);
  }
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* a = added_.find(id)) {
      if (skip_special_tokens && a->special) continue;
      tokens.push_back(a->content);
    } else if (const std::string* t = model_->id_to_token(id)) {
      tokens.push_back(*t);
    }
  }
  return run_decoder(decoder_.get(), std::move(tokens));
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = added_.find(id)) return a->content;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.token_to_id(token)) return id;
  return model_->token_to_id(token);
}

int32_t HfTokenizer::vocab_size() const {
  int32_t n = model_->vocab_size();
  for (const AddedToken& a : added_.tokens()) n = std::max(n, a.id + 1);
  return n;
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* a = added_.find(id);
  return a != nullptr && a->special;
}

}  // namespace rlm
