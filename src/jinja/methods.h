// Python methods reachable from templates through attribute access: str methods
// (startswith, split, strip, replace, upper, ...), dict.items/keys/values/get, list.index/count.
// Mutating methods exist (so attribute access matches Python) but raise SecurityError when
// called, as jinja2's ImmutableSandboxedEnvironment does.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace rlm::jinja {

// The bound method `obj.name`, or nullopt when `obj` has no such method.
std::optional<Value> bound_method(const Value& obj, const std::string& name);

// Python str helpers shared with the filters.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(const std::string& s);

}  // namespace rlm::jinja
