// Process-environment switches (RADIXLM_*), read where each one's default is documented.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rlm {

// A switch that is on by default: true unless the variable `name` is set to "0".
inline bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return e == nullptr || std::strcmp(e, "0") != 0;
}

// A switch that is off by default: true only if the variable `name` is set to "1".
inline bool env_switch_set(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, "1") == 0;
}

// A whole number: `fallback` when the variable `name` is unset or empty, else its decimal value (an
// error naming the variable when it is not one).
inline int64_t env_int64(const char* name, int64_t fallback) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(e, &end, 10);
  if (errno != 0 || *end != '\0') {
    throw std::invalid_argument(std::string(name) + "='" + e + "' is not a whole number");
  }
  return static_cast<int64_t>(v);
}

}  // namespace rlm
