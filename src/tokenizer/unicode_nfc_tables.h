// Unicode data for NFC normalization, generated into unicode_nfc_tables.cpp by
// tools/make_unicode_tables.py. All tables are sorted by their first field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rlm::unicode_tables {

struct CccEntry {
  char32_t cp;
  uint8_t ccc;  // canonical combining class (non-zero entries only)
};
struct DecompEntry {
  char32_t cp;
  uint16_t offset;  // into kDecompData: the full canonical decomposition
  uint8_t length;
};
struct ComposeEntry {
  char32_t first;
  char32_t second;
  char32_t composite;  // primary composite of (first, second)
};

extern const CccEntry kCcc[];
extern const size_t kCccSize;
extern const DecompEntry kDecomp[];
extern const size_t kDecompSize;
extern const char32_t kDecompData[];
extern const ComposeEntry kCompose[];
extern const size_t kComposeSize;

}  // namespace rlm::unicode_tables
