// jinja2's built-in filters used by chat templates, plus transformers' `tojson` override
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace rlm::jinja {

bool has_filter(std::string_view name);
// Applies the named filter to `v`; the caller guarantees has_filter(name).
Value call_filter(const std::string& name, const Value& v, const CallArgs& args);

}  // namespace rlm::jinja
