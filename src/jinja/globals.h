// The global functions a chat template can call: range, namespace, dict, joiner (jinja2; dict and
// namespace as transformers' TemplateDict / TemplateNamespace), raise_exception and strftime_now
// (transformers).
#pragma once

#include <string>
#include <unordered_map>

#include "jinja/template.h"
#include "jinja/value.h"

namespace rlm::jinja {

std::unordered_map<std::string, Value> make_globals(const RenderOptions& options);

// Python time.strftime-compatible formatting of `tm` in the C locale.
std::string py_strftime(const std::string& format, const std::tm& tm);

}  // namespace rlm::jinja
