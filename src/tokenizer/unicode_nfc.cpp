#include "tokenizer/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/unicode_nfc_tables.h"

namespace rlm {
namespace {

namespace ut = unicode_tables;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = ut::kDecomp + ut::kDecompSize;
  const auto* it = std::lower_bound(ut::kDecomp, end, cp,
                                    [](const ut::DecompEntry& e, char32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), ut::kDecompData + it->offset, ut::kDecompData + it->offset + it->length);
}

// The primary composite of (a, b), or 0 when there is none.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = ut::kCompose + ut::kComposeSize;
  const auto* it = std::lower_bound(ut::kCompose, end, std::make_pair(a, b),
                                    [](const ut::ComposeEntry& e, std::pair<char32_t, char32_t> k) {
                                      return e.first != k.first ? e.first < k.first
                                                                : e.second < k.second;
                                    });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

// Code points that NFC may change or that may change their neighbour: a non-zero combining
// class, a canonical decomposition (Hangul syllables included), or being the second element of a
// primary composite. Text without any of them is already NFC.
class MayChange {
 public:
  MayChange() : bits_(0x10000, false) {
    for (size_t i = 0; i < ut::kCccSize; ++i) mark(ut::kCcc[i].cp);
    for (size_t i = 0; i < ut::kDecompSize; ++i) mark(ut::kDecomp[i].cp);
    for (size_t i = 0; i < ut::kComposeSize; ++i) mark(ut::kCompose[i].second);
    for (char32_t c = kSBase; c < kSBase + kSCount; ++c) mark(c);
    for (char32_t c = kVBase; c < kVBase + kVCount; ++c) mark(c);
    for (char32_t c = kTBase + 1; c < kTBase + kTCount; ++c) mark(c);
  }
  bool operator()(char32_t cp) const {
    if (cp < 0x10000) return bits_[cp];
    return std::binary_search(astral_.begin(), astral_.end(), cp);
  }

 private:
  void mark(char32_t cp) {
    if (cp < 0x10000) {
      bits_[cp] = true;
    } else if (!std::binary_search(astral_.begin(), astral_.end(), cp)) {
      astral_.insert(std::upper_bound(astral_.begin(), astral_.end(), cp), cp);
    }
  }
  std::vector<bool> bits_;
  std::vector<char32_t> astral_;  // sorted
};

}  // namespace

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = ut::kCcc + ut::kCccSize;
  const auto* it =
      std::lower_bound(ut::kCcc, end, cp, [](const ut::CccEntry& e, char32_t c) { return e.cp < c; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

void canonical_order(std::u32string& cps) {
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
}

std::string nfc_normalize(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);
  }
  static const MayChange may_change;
  const std::u32string input = utf8::decode(text);
  if (std::none_of(input.begin(), input.end(), [](char32_t cp) { return may_change(cp); })) {
    return std::string(text);
  }
  std::vector<char32_t> decomposed;
  for (char32_t cp : input) decompose(cp, decomposed);
  std::u32string cps(decomposed.begin(), decomposed.end());
  canonical_order(cps);
  // Canonical composition.
  std::u32string out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // index in `out` of the last starter
  uint8_t last_ccc = 0;
  for (char32_t cp : cps) {
    const uint8_t ccc = combining_class(cp);
    if (starter != SIZE_MAX) {
      const bool blocked = !out.empty() && out.size() - 1 != starter && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (char32_t c = compose_pair(out[starter], cp)) {
          out[starter] = c;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = 0;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  return utf8::encode(out);
}

}  // namespace rlm
