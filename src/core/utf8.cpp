#include "core/utf8.h"

namespace rlm::utf8 {
namespace {

// Allowed range of the second byte of a sequence that starts with `lead` (Unicode Table 3-7).
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Expected sequence length for a lead byte, 0 for bytes that cannot start a sequence.
size_t lead_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

// Length of the maximal well-formed prefix of a sequence starting at s[i] (at least 1 byte).
size_t maximal_subpart(std::string_view s, size_t i, size_t* full_length) {
  const auto lead = static_cast<unsigned char>(s[i]);
  const size_t need = lead_length(lead);
  *full_length = need;
  if (need <= 1) return 1;
  size_t n = 1;
  while (n < need && i + n < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    const bool ok = (n == 1) ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t valid_sequence_length(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  size_t need = 0;
  const size_t n = maximal_subpart(s, i, &need);
  return (need != 0 && n == need) ? n : 0;
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t need = 0;
    const size_t n = maximal_subpart(s, i, &need);
    if (need != 0 && n == need) {
      out.append(s.substr(i, n));
    } else {
      append(out, kReplacement);
    }
    i += n;
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = valid_sequence_length(s, i);
    if (n == 0) {
      out.push_back(kReplacement);
      ++i;
      continue;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    const size_t len = valid_sequence_length(s, i);
    i += len == 0 ? 1 : len;
  }
  return n;
}

size_t incomplete_suffix_length(std::string_view s) {
  // A multi-byte sequence is at most 4 bytes: look back at most 3 bytes for its lead byte.
  const size_t lookback = s.size() < 3 ? s.size() : 3;
  for (size_t k = 1; k <= lookback; ++k) {
    const size_t i = s.size() - k;
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    const size_t n = maximal_subpart(s, i, &need);
    return (need > k && n == k) ? k : 0;
  }
  return 0;
}

}  // namespace rlm::utf8
