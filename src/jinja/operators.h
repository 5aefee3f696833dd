// Python semantics of the operators and accessors templates use: arithmetic, `~`, `in`,
// attribute and item lookup (with jinja2's undefined-on-missing rules), slicing, iteration.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace rlm::jinja {

// markupsafe.escape() of a plain string.
std::string html_escape(const std::string& s);

// op is one of + - * / // % **
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& v);
// Python `item in container` (substring for strings, key for dicts, element for lists).
bool contains(const Value& container, const Value& item);
// `obj.name` in jinja2's sandbox: Python attribute first (methods), then item.
Value get_attr(const Value& obj, const std::string& name);
// `obj[key]`: item first, then attribute; missing -> Undefined.
Value get_item(const Value& obj, const Value& key);
Value slice(const Value& obj, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
            const std::optional<int64_t>& step);
// The items a for-loop visits: list elements, dict keys, string characters; Undefined -> none.
std::vector<Value> iterate(const Value& v);
// Python len().
int64_t length(const Value& v);

}  // namespace rlm::jinja
