#include "tokenizer/byte_level.h"

#include <array>
#include <unordered_map>

#include "core/utf8.h"

namespace rlm::byte_level {
namespace {

struct Alphabet {
  std::array<std::string, 256> byte_to_utf8;
  std::unordered_map<char32_t, unsigned char> code_point_to_byte;

  Alphabet() {
    // Printable Latin-1 bytes map to themselves; the others to U+0100 upwards, in byte order.
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next++;
      utf8::append(byte_to_utf8[b], cp);
      code_point_to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

std::string encode(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

bool decode(std::string_view token, std::string* out) {
  const Alphabet& a = alphabet();
  std::string bytes;
  bytes.reserve(token.size());
  for (char32_t cp : utf8::decode(token)) {
    auto it = a.code_point_to_byte.find(cp);
    if (it == a.code_point_to_byte.end()) return false;
    bytes.push_back(static_cast<char>(it->second));
  }
  *out += bytes;
  return true;
}

}  // namespace rlm::byte_level
