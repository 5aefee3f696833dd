#include "server/api_key.h"

#include <cstdint>

#include "server/http_exchange.h"

namespace rlm {

bool constant_time_equals(std::string_view given, std::string_view secret) {
  uint8_t diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) {
    const uint8_t s = i < secret.size() ? static_cast<uint8_t>(secret[i]) : 0;
    diff |= static_cast<uint8_t>(given[i]) ^ s;
  }
  // Read through a volatile so the compiler keeps the whole loop (no early exit on a difference).
  volatile uint8_t result = diff;
  return result == 0;
}

bool bearer_matches(std::optional<std::string_view> authorization, std::string_view key) {
  if (!authorization) return false;
  std::string_view v = *authorization;
  auto is_space = [](char c) { return c == ' ' || c == '\t'; };
  while (!v.empty() && is_space(v.front())) v.remove_prefix(1);
  while (!v.empty() && is_space(v.back())) v.remove_suffix(1);
  size_t sp = 0;
  while (sp < v.size() && !is_space(v[sp])) ++sp;
  if (!iequals(v.substr(0, sp), "bearer")) return false;
  std::string_view token = v.substr(sp);
  while (!token.empty() && is_space(token.front())) token.remove_prefix(1);
  return constant_time_equals(token, key);
}

}  // namespace rlm
