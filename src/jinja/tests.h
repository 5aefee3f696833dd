// jinja2's built-in tests (`x is string`, `x is defined`, `x is equalto 3`, ...).
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace rlm::jinja {

bool has_test(std::string_view name);
// Applies the named test; the caller guarantees has_test(name).
bool call_test(const std::string& name, const Value& v, const CallArgs& args);

}  // namespace rlm::jinja
