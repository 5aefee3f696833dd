#include "jinja/py_str.h"

namespace rlm::jinja {

bool py_isspace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool py_isprintable(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x2064) || cp == 0x3000 || cp == 0xFEFF) return false;
  if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0xE000 && cp <= 0xF8FF)) return false;
  return true;
}

namespace {

// Upper-case partner of a lower-case letter, or 0.
char32_t upper_of(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    const bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_lower) return (cp % 2 == 0) ? cp - 1 : 0;
    return (cp % 2 == 1) ? cp - 1 : 0;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return 0;
}

char32_t lower_of(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    const bool odd_upper = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_upper) return (cp % 2 == 1) ? cp + 1 : 0;
    return (cp % 2 == 0) ? cp + 1 : 0;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return 0;
}

}  // namespace

char32_t py_toupper(char32_t cp) {
  const char32_t u = upper_of(cp);
  return u ? u : cp;
}
char32_t py_tolower(char32_t cp) {
  const char32_t l = lower_of(cp);
  return l ? l : cp;
}
bool py_isupper(char32_t cp) { return lower_of(cp) != 0; }
bool py_islower(char32_t cp) { return upper_of(cp) != 0 || cp == 0xDF; }
bool py_isalpha(char32_t cp) {
  return py_isupper(cp) || py_islower(cp) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0xAC00 && cp <= 0xD7A3);
}
bool py_isdigit(char32_t cp) { return cp >= '0' && cp <= '9'; }

}  // namespace rlm::jinja
