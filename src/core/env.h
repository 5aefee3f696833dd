// Process-environment switches (RADIXLM_*), read where each one's default is documented.
#pragma once

#include <cstdlib>
#include <cstring>

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

}  // namespace rlm
