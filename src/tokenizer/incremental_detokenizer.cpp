#include "tokenizer/incremental_detokenizer.h"

#include "core/check.h"

namespace rlm {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacementUtf8.size() &&
         std::string_view(s).substr(s.size() - kReplacementUtf8.size()) == kReplacementUtf8;
}

// Context tokens of the prompt that the first window starts with.
constexpr size_t kPromptContext = 6;

// "<0xAB>": a byte-fallback piece. Hugging Face's ByteFallback decoder turns a whole run of them
// into U+FFFDs once any byte makes the run invalid, so text decoded from an open run can still
// change: nothing is emitted while the last id the decoder sees is a byte piece (a skipped
// special token between two byte pieces does not end their run).
bool is_byte_piece(const std::optional<std::string>& token) {
  return token && token->size() == 6 && token->compare(0, 3, "<0x") == 0 && (*token)[5] == '>';
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens), ids_(prompt_ids.begin(), prompt_ids.end()) {
  prompt_size_ = ids_.size();
  prefix_offset_ = prompt_size_ > kPromptContext ? prompt_size_ - kPromptContext : 0;
  read_offset_ = prompt_size_;
  if (prompt_size_ > 0) prompt_text_ = decode_range(0, prompt_size_);
}

std::string IncrementalDetokenizer::decode_range(size_t begin, size_t end) const {
  return tokenizer_.decode(std::span<const int32_t>(ids_.data() + begin, end - begin), skip_special_tokens_);
}

bool IncrementalDetokenizer::ends_in_byte_run() const {
  for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
    const auto token = tokenizer_.id_to_token(*it);
    if (!token || (skip_special_tokens_ && tokenizer_.is_special(*it))) continue;
    return is_byte_piece(token);
  }
  return false;
}

std::string IncrementalDetokenizer::take_piece(const std::string& prefix_text, const std::string& new_text) {
  if (new_text.compare(0, prefix_text.size(), prefix_text) == 0) {
    return new_text.substr(prefix_text.size());
  }
  // The window decode disagreed with its prefix: fall back to the full decode. Without a prompt
  // that is always consistent with what was streamed. With a prompt that ends inside a
  // character (or a byte-fallback run) which the generated ids complete, the prompt's own text
  // changes: the generated text then starts where the two texts first differ.
  std::string full = decode_range(0, ids_.size());
  size_t common = 0;
  while (common < full.size() && common < prompt_text_.size() && full[common] == prompt_text_[common]) ++common;
  while (common > 0 && common < full.size() && (static_cast<unsigned char>(full[common]) & 0xC0) == 0x80) --common;
  full.erase(0, common);
  if (full.compare(0, emitted_.size(), emitted_) != 0) {
    RLM_CHECK(prompt_size_ > 0) << "streamed text is not a prefix of the full decode";
    return {};  // the prompt's text changed under already streamed text; nothing can be retracted
  }
  return full.substr(emitted_.size());
}

std::string IncrementalDetokenizer::push(int32_t id) {
  RLM_CHECK(!finished_) << "IncrementalDetokenizer::push after finish";
  ids_.push_back(id);
  if (ends_in_byte_run()) return {};
  const std::string prefix_text = decode_range(prefix_offset_, read_offset_);
  const std::string new_text = decode_range(prefix_offset_, ids_.size());
  // Hold back while the text does not grow (e.g. a skipped special token) or ends in U+FFFD
  // (an incomplete UTF-8 character or byte-fallback run that the next ids may complete).
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return {};
  std::string piece = take_piece(prefix_text, new_text);
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  emitted_ += piece;
  return piece;
}

std::string IncrementalDetokenizer::finish() {
  RLM_CHECK(!finished_) << "IncrementalDetokenizer::finish called twice";
  finished_ = true;
  if (read_offset_ == ids_.size()) return {};
  const std::string prefix_text = decode_range(prefix_offset_, read_offset_);
  const std::string new_text = decode_range(prefix_offset_, ids_.size());
  std::string piece = take_piece(prefix_text, new_text);
  read_offset_ = ids_.size();
  emitted_ += piece;
  return piece;
}

}  // namespace rlm
