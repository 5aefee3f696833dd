// Streaming detokenization: feed generated ids one at a time and get text pieces as soon as they
// are final. A piece never ends inside a UTF-8 character, byte-fallback runs (<0xE4><0xB8><0xAD>)
// are held back until the run ends, and SentencePiece leading-space rules are respected by always
// decoding a window that starts one emitted token earlier (the scheme vLLM and TGI use). The
// concatenation of all pieces, finish() included, equals tokenizer.decode(ids, skip_special_tokens)
// of the generated ids (with no prompt), and decode(prompt + ids) minus decode(prompt) when a
// prompt is given (if the prompt ends inside a character that the generated ids complete, the
// completed character is part of the streamed text).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace rlm {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. `prompt_ids` gives context for the first pieces (so a
  // first generated "▁Hello" after a prompt streams as " Hello").
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const int32_t> prompt_ids = {});

  // Adds one generated id; returns the text that became final (possibly empty).
  std::string push(int32_t id);

  // Returns the text still held back (a trailing U+FFFD or an incomplete byte run) once
  // generation has ended. push() may not be called afterwards.
  std::string finish();

  // All text returned so far.
  const std::string& text() const { return emitted_; }

 private:
  // Decodes ids_[begin, end).
  std::string decode_range(size_t begin, size_t end) const;
  // True when the last id the decoder sees (skipped special tokens and unknown ids are not seen)
  // is a byte-fallback piece: its run may still turn into U+FFFDs.
  bool ends_in_byte_run() const;
  // The piece between the window text and its prefix text, re-synchronising on the full decode
  // if the prefix property ever fails.
  std::string take_piece(const std::string& prefix_text, const std::string& new_text);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  bool finished_ = false;
  std::vector<int32_t> ids_;
  size_t prompt_size_ = 0;
  size_t prefix_offset_ = 0;  // start of the decoded window (one emission back)
  size_t read_offset_ = 0;    // ids_ before this index have been emitted
  std::string prompt_text_;   // decode of the prompt (for re-synchronisation)
  std::string emitted_;
};

}  // namespace rlm
