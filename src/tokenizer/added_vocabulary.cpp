#include "tokenizer/added_vocabulary.h"

#include <nlohmann/json.hpp>

#include "core/utf8.h"
#include "tokenizer/regex.h"

namespace rlm {
namespace {

bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Rust's char::is_alphanumeric() || '_' (approximated by letters, marks of letters and numbers).
bool is_word_char(std::string_view ch) {
  static const StatusOr<Regex> re = Regex::compile(R"(^[\p{L}\p{N}_]$)");
  return !re.value().find_all(ch).empty();
}

std::string_view last_char(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  return i > 0 ? s.substr(i - 1) : std::string_view();
}

std::string_view first_char(std::string_view s) {
  if (s.empty()) return s;
  const size_t n = utf8::valid_sequence_length(s, 0);
  return s.substr(0, n == 0 ? 1 : n);
}

}  // namespace

StatusOr<AddedVocabulary> AddedVocabulary::from_json(const nlohmann::json& added_tokens) {
  AddedVocabulary v;
  for (int k = 0; k < 2; ++k) v.trie_[k].emplace_back();
  if (added_tokens.is_null()) return v;
  if (!added_tokens.is_array()) return invalid_argument("tokenizer.json 'added_tokens' must be an array");
  for (const auto& t : added_tokens) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
        !t["content"].is_string()) {
      return invalid_argument("tokenizer.json added token needs an integer 'id' and a string 'content'");
    }
    AddedToken a;
    a.id = t["id"].get<int32_t>();
    a.content = t["content"];
    a.special = t.value("special", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    a.single_word = t.value("single_word", false);
    a.normalized = t.value("normalized", !a.special);
    if (a.content.empty()) return invalid_argument("tokenizer.json added token " + std::to_string(a.id) + " is empty");
    const size_t index = v.tokens_.size();
    v.by_id_[a.id] = index;
    v.by_content_[a.content] = index;
    v.has_normalized_ = v.has_normalized_ || a.normalized;
    auto& trie = v.trie_[a.normalized ? 1 : 0];
    int node = 0;
    for (char c : a.content) {
      auto it = trie[node].children.find(static_cast<unsigned char>(c));
      if (it == trie[node].children.end()) {
        trie.emplace_back();
        const int child = static_cast<int>(trie.size()) - 1;
        trie[node].children[static_cast<unsigned char>(c)] = child;
        node = child;
      } else {
        node = it->second;
      }
    }
    trie[node].token = static_cast<int>(index);
    v.tokens_.push_back(std::move(a));
  }
  return v;
}

int AddedVocabulary::longest_match(std::string_view text, size_t pos, bool normalized) const {
  const auto& trie = trie_[normalized ? 1 : 0];
  int node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = trie[node].children.find(static_cast<unsigned char>(text[i]));
    if (it == trie[node].children.end()) break;
    node = it->second;
    if (trie[node].token >= 0) best = trie[node].token;
  }
  return best;
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::split(std::string_view text, bool normalized,
                                                             bool allow_special) const {
  std::vector<Segment> out;
  size_t start_offset = 0;  // end of the last emitted piece
  size_t pos = 0;
  while (pos < text.size()) {
    const int m = longest_match(text, pos, normalized);
    if (m < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[m];
    size_t start = pos, stop = pos + tok.content.size();
    pos = stop;  // the matcher resumes after this match even when it is skipped below
    if (tok.special && !allow_special) continue;
    if (tok.single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool stop_ok = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        std::string_view c = last_char(text.substr(0, s));
        if (!is_white_space(utf8::decode(c)[0])) break;
        s -= c.size();
      }
      start = s;
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        std::string_view c = first_char(text.substr(stop));
        if (!is_white_space(utf8::decode(c)[0])) break;
        stop += c.size();
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({std::string(text.substr(start_offset, start - start_offset)), -1});
    out.push_back({std::string(text.substr(start, stop - start)), tok.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({std::string(text.substr(start_offset)), -1});
  return out;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

}  // namespace rlm
