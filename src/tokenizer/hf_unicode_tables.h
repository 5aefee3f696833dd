// Per-code-point data of Hugging Face tokenizers' BertNormalizer and punctuation test (taken from
// the tokenizers package, whose Unicode versions differ from other libraries'), generated into
// hf_unicode_tables.cpp by tools/make_hf_unicode_tables.py. All tables are sorted by code point.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rlm::hf_tables {

struct Range {
  char32_t first, last;  // inclusive
};
struct Mapping {
  char32_t cp;
  uint16_t offset;  // into kData
  uint8_t length;
};

extern const Range kRemoved[];  // deleted by clean_text
extern const size_t kRemovedSize;
extern const char32_t kSpace[];  // turned into " " by clean_text
extern const size_t kSpaceSize;
extern const Mapping kLower[];  // lowercase mapping
extern const size_t kLowerSize;
extern const Mapping kNfd[];  // canonical decomposition (Hangul syllables excluded)
extern const size_t kNfdSize;
extern const Range kMn[];  // nonspacing marks, deleted by strip_accents
extern const size_t kMnSize;
extern const Range kPunctuation[];  // isolated by the Punctuation and BertPreTokenizer pre-tokenizers
extern const size_t kPunctuationSize;
extern const char32_t kData[];
extern const size_t kDataSize;

}  // namespace rlm::hf_tables
