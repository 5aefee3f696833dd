#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/json.h"
#include "core/utf8.h"

namespace rlm {

SentencePieceTokenizer::SentencePieceTokenizer() : sp_(new sentencepiece::SentencePieceProcessor()) {}
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(const std::string& path) {
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  const auto st = t->sp_->Load(path);
  if (!st.ok()) return invalid_argument("cannot load SentencePiece model " + path + ": " + st.ToString());
  nlohmann::json controls = nlohmann::json::array();
  for (int i = 0; i < t->sp_->GetPieceSize(); ++i) {
    if (t->sp_->IsControl(i) && !t->sp_->IdToPiece(i).empty()) {
      controls.push_back({{"id", i}, {"content", t->sp_->IdToPiece(i)}, {"special", true}, {"normalized", false}});
    }
  }
  RLM_ASSIGN_OR_RETURN(t->controls_, AddedVocabulary::from_json(controls));
  if (t->sp_->bos_id() >= 0) t->bos_id_ = t->sp_->bos_id();
  if (t->sp_->eos_id() >= 0) t->eos_id_ = t->sp_->eos_id();
  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    StatusOr<nlohmann::json> config = read_json_file(config_path.string());
    if (!config.is_ok() || !config->is_object()) {
      return invalid_argument("malformed JSON in " + config_path.string() +
                              (config.is_ok() ? ": not an object" : ": " + config.status().message()));
    }
    for (const auto& [key, flag] : {std::pair{"add_bos_token", &t->add_bos_}, std::pair{"add_eos_token", &t->add_eos_}}) {
      if (!config->contains(key) || (*config)[key].is_null()) continue;
      if (!(*config)[key].is_boolean()) return invalid_argument(str(config_path.string(), ": '", key, "' must be a boolean"));
      *flag = (*config)[key].get<bool>();
    }
  }
  return t;
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_special_tokens,
                                                    bool allow_special) const {
  const std::string clean = utf8::sanitize(text);
  std::vector<int32_t> out;
  if (add_special_tokens && add_bos_ && bos_id_) out.push_back(*bos_id_);
  std::vector<AddedVocabulary::Segment> segments;
  if (allow_special) segments = controls_.split(clean, /*normalized=*/false, true);
  else if (!clean.empty()) segments.push_back({clean, -1});
  std::vector<int> ids;
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    const auto st = sp_->Encode(seg.text, &ids);
    RLM_CHECK(st.ok()) << "SentencePiece encode failed: " << st.ToString();
    out.insert(out.end(), ids.begin(), ids.end());
  }
  if (add_special_tokens && add_eos_ && eos_id_) out.push_back(*eos_id_);
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  std::vector<int> run;
  auto flush = [&]() {
    if (run.empty()) return;
    std::string text;
    const auto st = sp_->Decode(run, &text);
    RLM_CHECK(st.ok()) << "SentencePiece decode failed: " << st.ToString();
    if (!out.empty() && sp_->IdToPiece(run[0]).rfind("\xE2\x96\x81", 0) == 0) out += ' ';
    out += text;
    run.clear();
  };
  const int n = sp_->GetPieceSize();
  for (int32_t id : ids) {
    if (id < 0 || id >= n) continue;
    if (sp_->IsControl(id)) {
      if (skip_special_tokens) continue;
      flush();
      out += sp_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return utf8::sanitize(out);
}

std::optional<std::string> SentencePieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize()) return std::nullopt;
  return sp_->IdToPiece(id);
}

std::optional<int32_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  // PieceToId returns unk for unknown pieces; only accept it when the piece really is unk's.
  if (id == sp_->unk_id() && sp_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

bool SentencePieceTokenizer::is_special(int32_t id) const {
  return id >= 0 && id < sp_->GetPieceSize() && sp_->IsControl(id);
}

}  // namespace rlm
