#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/utf8.h"

namespace rlm {

using nlohmann::json;

StatusOr<BpeModel> BpeModel::from_json(const json& model) {
  if (!model.is_object()) return invalid_argument("tokenizer.json 'model' must be an object");
  const std::string type = model.value("type", "BPE");
  if (type != "BPE") return unimplemented("unsupported tokenizer.json model type '" + type + "' (only BPE)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return invalid_argument("tokenizer.json BPE model has no 'vocab' object");
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return invalid_argument("tokenizer.json BPE model has no 'merges' array");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return unimplemented(str("tokenizer.json BPE '", key, "' is not supported"));
    }
  }
  if (model.contains("dropout") && !model["dropout"].is_null()) {
    return unimplemented("tokenizer.json BPE dropout is not supported");
  }
  BpeModel m;
  RLM_RETURN_IF_ERROR(read_vocab(model["vocab"], m.vocab_, m.id_to_token_, m.has_id_));
  int32_t rank = 0;
  for (const json& merge : model["merges"]) {
    std::string a, b;
    if (merge.is_string()) {  // older "a b" form
      const std::string s = merge;
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return invalid_argument("tokenizer.json merge '" + s + "' has no space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      a = merge[0];
      b = merge[1];
    } else {
      return invalid_argument("tokenizer.json merge #" + std::to_string(rank) + " is malformed");
    }
    auto ia = m.vocab_.find(a), ib = m.vocab_.find(b), iab = m.vocab_.find(a + b);
    if (ia == m.vocab_.end() || ib == m.vocab_.end() || iab == m.vocab_.end()) {
      return invalid_argument("tokenizer.json merge '" + a + " " + b + "' uses tokens missing from the vocab");
    }
    m.merges_[pair_key(ia->second, ib->second)] = MergeTarget{rank, iab->second};  // last wins, as in HF
    ++rank;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = m.vocab_.find(model["unk_token"].get<std::string>());
    if (it == m.vocab_.end()) return invalid_argument("tokenizer.json unk_token is not in the vocab");
    m.unk_id_ = it->second;
  }
  m.fuse_unk_ = model.value("fuse_unk", false);
  m.byte_fallback_ = model.value("byte_fallback", false);
  m.ignore_merges_ = model.value("ignore_merges", false);
  m.bmp_char_ids_.assign(0x10000, -1);
  for (const auto& [tok, id] : m.vocab_) {
    const size_t n = utf8::valid_sequence_length(tok, 0);
    if (n != 0 && n == tok.size() && n <= 3) {
      const char32_t cp = utf8::decode(tok)[0];
      if (cp < 0x10000) m.bmp_char_ids_[cp] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m.vocab_.find(name);
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

int32_t BpeModel::char_id(std::string_view ch) const {
  const auto c = static_cast<unsigned char>(ch[0]);
  if (ch.size() <= 3 && (c < 0x80 || ch.size() > 1)) {  // a whole BMP character
    char32_t cp = ch.size() == 1 ? c : ch.size() == 2 ? (c & 0x1F) : (c & 0x0F);
    for (size_t k = 1; k < ch.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(ch[k]) & 0x3F);
    return bmp_char_ids_[cp];
  }
  auto it = vocab_.find(std::string(ch));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > WordCache::kMaxWordBytes) {
    tokenize_uncached(word, out);
    return;
  }
  const std::string key(word);
  auto& shard = cache_->shards[std::hash<std::string>()(key) % WordCache::kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.words.find(key);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t begin = out.size();
  tokenize_uncached(word, out);
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.words.size() >= WordCache::kShardCapacity) shard.words.clear();
  shard.words.emplace(key, std::vector<int32_t>(out.begin() + begin, out.end()));
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Initial symbols: one per character; unknown characters become byte tokens (byte_fallback)
  // or unk (consecutive unks fused with fuse_unk). As in Hugging Face, a pending unk is only
  // emitted when a known character or the end of the word follows.
  std::vector<int32_t> symbols;
  int32_t pending_unk = -1;  // -1: none
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    size_t n = utf8::valid_sequence_length(word, i);
    if (n == 0) n = 1;
    ch.assign(word.substr(i, n));
    i += n;
    if (const int32_t id = char_id(ch); id >= 0) {
      if (pending_unk >= 0) symbols.push_back(pending_unk);
      pending_unk = -1;
      symbols.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
  merge_word(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::merge_word(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto push_pair = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(symbols[pos], symbols[next[pos]]));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int right = next[top.pos];
    auto it = merges_.find(pair_key(symbols[top.pos], symbols[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    symbols[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push_pair(prev[top.pos]);
    push_pair(top.pos);
  }
  std::vector<int32_t> merged;
  for (int i = 0; i >= 0; i = next[i]) merged.push_back(symbols[i]);
  symbols = std::move(merged);
}

}  // namespace rlm
