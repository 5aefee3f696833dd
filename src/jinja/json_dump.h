// Python's json.dumps over template values, as transformers' `tojson` filter calls it
// (ensure_ascii=False by default, optional indent, separators and sort_keys).
#pragma once

#include <optional>
#include <string>

#include "jinja/value.h"

namespace rlm::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: one line; else the per-level indent string
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool sort_keys = false;
};

// Raises TypeError (like Python) for Undefined, functions and namespaces.
std::string py_json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace rlm::jinja
