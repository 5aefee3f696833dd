#include "jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "core/utf8.h"
#include "jinja/json_dump.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/py_str.h"
#include "jinja/tests.h"

namespace rlm::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

// Drops the first `n` positional arguments (for select/map which forward the rest).
CallArgs rest_args(const CallArgs& a, size_t n) {
  CallArgs out;
  for (size_t i = n; i < a.args.size(); ++i) out.args.push_back(a.args[i]);
  out.kwargs = a.kwargs;
  return out;
}

// jinja2's make_attrgetter: "a.b.0" walks get_item per dotted part.
Value attr_lookup(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value cur = item;
  size_t start = 0;
  const std::string& path = attribute.str();
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    char* end = nullptr;
    const long long idx = std::strtoll(part.c_str(), &end, 10);
    cur = (!part.empty() && *end == '\0') ? get_item(cur, Value(static_cast<int64_t>(idx))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

bool select_test(const Value& item, const CallArgs& a, size_t test_pos) {
  if (a.args.size() <= test_pos) return truthy(item);
  const Value& name = a.args[test_pos];
  if (!name.is_string()) throw_type_error("test name must be a string");
  return call_test(name.str(), item, rest_args(a, test_pos + 1));
}

Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::list();  // jinja2 guards with `if value:` (so none|select is empty)
  for (const Value& item : iterate(v)) {
    const Value probe = by_attr ? attr_lookup(item, arg_or(a, 0, "attribute", Value())) : item;
    if (select_test(probe, a, by_attr ? 1 : 0) == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_impl(const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return Value::list();  // jinja2's do_map guards with `if value:`
  Value attribute = arg_or(CallArgs{{}, a.kwargs}, 99, "attribute", Value());
  if (!attribute.is_undefined()) {
    const Value dflt = arg_or(CallArgs{{}, a.kwargs}, 99, "default", Value());
    for (const Value& item : iterate(v)) {
      Value r = attr_lookup(item, attribute);
      out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
    }
    return Value::list(std::move(out));
  }
  if (a.args.empty() || !a.args[0].is_string()) throw_type_error("map requires a filter name or attribute=");
  const std::string name = a.args[0].str();
  if (!has_filter(name)) throw RenderError(RenderError::Kind::kRuntime, "No filter named '" + name + "'.");
  const CallArgs rest = rest_args(a, 1);
  for (const Value& item : iterate(v)) out.push_back(call_filter(name, item, rest));
  return Value::list(std::move(out));
}

Value sorted_list(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  auto key = [&](const Value& x) { return sort_key(attribute.is_undefined() ? x : attr_lookup(x, attribute), case_sensitive); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
  });
  return Value::list(std::move(items));
}

Value do_int(const Value& v, const CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default", Value(0));
  const int base = static_cast<int>(arg_or(a, 1, "base", Value(10)).as_int());
  if (v.is_undefined()) require_defined(v);
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(std::trunc(v.as_double()))) : dflt;
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value::none(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      char* end = nullptr;
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, base);
      if (*end == '\0' && errno == 0) return Value(static_cast<int64_t>(i));
      const double d = std::strtod(s.c_str(), &end);
      if (*end == '\0' && std::isfinite(d)) return Value(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return dflt;
}

Value do_float(const Value& v, const CallArgs& a) {
  const Value dflt = arg_or(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.str(), Value::none(), true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  return dflt;
}

Value do_indent(const Value& v, const CallArgs& a) {
  const Value width = arg_or(a, 0, "width", Value(4));
  const bool first = truthy(arg_or(a, 1, "first", Value(false)));
  const bool blank = truthy(arg_or(a, 2, "blank", Value(false)));
  const std::string indention = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  const std::vector<std::string> lines = py_splitlines(to_str(v) + "\n");
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  return Value(first ? indention + rv : rv);
}

Value do_tojson(const Value& v, const CallArgs& a) {
  JsonDumpOptions opt;
  opt.ensure_ascii = truthy(arg_or(a, 0, "ensure_ascii", Value(false)));
  const Value indent = arg_or(a, 1, "indent", Value::none());
  if (indent.is_string()) opt.indent = indent.str();
  else if (indent.is_int()) opt.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  else if (!indent.is_none()) throw_type_error("tojson indent must be an int or a string");
  const Value seps = arg_or(a, 2, "separators", Value::none());
  if (seps.is_list() && seps.items().size() == 2 && seps.items()[0].is_string() && seps.items()[1].is_string()) {
    opt.separators = std::make_pair(seps.items()[0].str(), seps.items()[1].str());
  } else if (!seps.is_none()) {
    throw_type_error("tojson separators must be a pair of strings");
  }
  opt.sort_keys = truthy(arg_or(a, 3, "sort_keys", Value(false)));
  return Value(py_json_dumps(v, opt));
}

Value min_max(const Value& v, const CallArgs& a, bool want_max) {
  const bool cs = truthy(arg_or(a, 0, "case_sensitive", Value(false)));
  const Value attribute = arg_or(a, 1, "attribute", Value());
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  Value best = items[0];
  auto key = [&](const Value& x) { return sort_key(attribute.is_undefined() ? x : attr_lookup(x, attribute), cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare(key(items[i]), key(best));
    if (want_max ? c > 0 : c < 0) best = items[i];
  }
  return best;
}

const std::unordered_map<std::string, FilterFn>& registry() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"abs", [](const Value& v, const CallArgs&) {
         require_defined(v);
         if (v.is_float()) return Value(std::fabs(v.as_double()));
         if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
         throw_type_error("bad operand type for abs(): '" + type_name(v) + "'");
       }},
      {"attr", [](const Value& v, const CallArgs& a) {
         // Python getattr only: dict items are not attributes.
         const std::string name = to_str(arg_or(a, 0, "name", Value()));
         if (v.is_namespace()) return get_attr(v, name);
         require_defined(v);
         std::optional<Value> m = bound_method(v, name);
         return m ? *m : Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
       }},
      {"capitalize", [](const Value& v, const CallArgs&) { return Value(py_capitalize(to_str(v))); }},
      {"center", [](const Value& v, const CallArgs& a) {
         const std::string s = to_str(v);
         const int64_t width = arg_or(a, 0, "width", Value(80)).as_int();
         const int64_t len = static_cast<int64_t>(utf8::length(s));
         if (width <= len) return Value(s);
         const int64_t total = width - len;
         const int64_t left = total / 2 + (total & width & 1);
         return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
       }},
      {"default", [](const Value& v, const CallArgs& a) {
         const bool boolean = truthy(arg_or(a, 1, "boolean", Value(false)));
         if (v.is_undefined() || (boolean && !truthy(v))) return arg_or(a, 0, "default_value", Value(""));
         return v;
       }},
      {"dictsort", [](const Value& v, const CallArgs& a) {
         require_defined(v);
         if (!v.is_dict()) throw_type_error("You can only sort by either \"key\" or \"value\" of a mapping");
         const bool cs = truthy(arg_or(a, 0, "case_sensitive", Value(false)));
         const std::string by = to_str(arg_or(a, 1, "by", Value("key")));
         const bool reverse = truthy(arg_or(a, 2, "reverse", Value(false)));
         if (by != "key" && by != "value") throw RenderError(RenderError::Kind::kValue, "You can only sort by either \"key\" or \"value\"");
         const size_t pos = by == "key" ? 0 : 1;
         std::vector<Value> items;
         for (const auto& [k, item] : v.dict_data().items) items.push_back(Value::tuple({k, item}));
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
           const Value kx = sort_key(x.items()[pos], cs), ky = sort_key(y.items()[pos], cs);
           return reverse ? compare(ky, kx) < 0 : compare(kx, ky) < 0;
         });
         return Value::list(std::move(items));
       }},
      {"escape", [](const Value& v, const CallArgs&) { return v.is_markup() ? v : Value::markup(html_escape(to_str(v))); }},
      {"first", [](const Value& v, const CallArgs&) {
         std::vector<Value> items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
       }},
      {"float", do_float},
      {"indent", do_indent},
      {"int", do_int},
      {"items", [](const Value& v, const CallArgs&) {
         if (v.is_undefined()) return Value::list();
         if (!v.is_dict()) throw_type_error("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [k, item] : v.dict_data().items) out.push_back(Value::tuple({k, item}));
         return Value::list(std::move(out));
       }},
      {"join", [](const Value& v, const CallArgs& a) {
         const std::string sep = to_str(arg_or(a, 0, "d", Value("")));
         const Value attribute = arg_or(a, 1, "attribute", Value::none());
         std::string out;
         bool first = true;
         for (const Value& item : iterate(v)) {
           if (!first) out += sep;
           first = false;
           out += to_str(attribute.is_none() ? item : attr_lookup(item, attribute));
         }
         return Value(out);
       }},
      {"last", [](const Value& v, const CallArgs&) {
         std::vector<Value> items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](const Value& v, const CallArgs&) { return Value(length(v)); }},
      {"list", [](const Value& v, const CallArgs&) { return Value::list(iterate(v)); }},
      {"lower", [](const Value& v, const CallArgs&) { return Value(py_lower(to_str(v))); }},
      {"map", map_impl},
      {"max", [](const Value& v, const CallArgs& a) { return min_max(v, a, true); }},
      {"min", [](const Value& v, const CallArgs& a) { return min_max(v, a, false); }},
      {"reject", [](const Value& v, const CallArgs& a) { return select_impl(v, a, false, false); }},
      {"rejectattr", [](const Value& v, const CallArgs& a) { return select_impl(v, a, true, false); }},
      {"replace", [](const Value& v, const CallArgs& a) {
         const Value count = arg_or(a, 2, "count", Value::none());
         return Value(py_replace(to_str(v), to_str(arg_or(a, 0, "old", Value())), to_str(arg_or(a, 1, "new", Value())),
                                 count.is_none() ? -1 : count.as_int()));
       }},
      {"reverse", [](const Value& v, const CallArgs&) {
         if (v.is_string()) {
           std::u32string cps = utf8::decode(v.str());
           std::reverse(cps.begin(), cps.end());
           return Value(utf8::encode(cps));
         }
         std::vector<Value> items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"round", [](const Value& v, const CallArgs& a) {
         const int64_t precision = arg_or(a, 0, "precision", Value(0)).as_int();
         const std::string method = to_str(arg_or(a, 1, "method", Value("common")));
         const double scale = std::pow(10.0, static_cast<double>(precision));
         const double x = v.as_double() * scale;
         double r = 0;
         if (method == "common") r = std::nearbyint(x);
         else if (method == "ceil") r = std::ceil(x);
         else if (method == "floor") r = std::floor(x);
         else throw_type_error("method must be common, ceil or floor");
         return Value(r / scale);
       }},
      {"safe", [](const Value& v, const CallArgs&) { return v.is_markup() ? v : Value::markup(to_str(v)); }},
      {"select", [](const Value& v, const CallArgs& a) { return select_impl(v, a, false, true); }},
      {"selectattr", [](const Value& v, const CallArgs& a) { return select_impl(v, a, true, true); }},
      {"sort", [](const Value& v, const CallArgs& a) {
         return sorted_list(iterate(v), truthy(arg_or(a, 0, "reverse", Value(false))),
                            truthy(arg_or(a, 1, "case_sensitive", Value(false))), arg_or(a, 2, "attribute", Value()));
       }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_markup() ? v : Value(to_str(v)); }},
      {"sum", [](const Value& v, const CallArgs& a) {
         const Value attribute = arg_or(a, 0, "attribute", Value());
         Value total = arg_or(a, 1, "start", Value(0));
         for (const Value& item : iterate(v)) total = binary_op("+", total, attribute.is_undefined() ? item : attr_lookup(item, attribute));
         return total;
       }},
      {"title", [](const Value& v, const CallArgs&) {
         // jinja2 splits on [-\s({\[<]+ and capitalizes each piece.
         const std::u32string cps = utf8::decode(to_str(v));
         std::u32string out;
         bool at_start = true;
         for (char32_t cp : cps) {
           const bool sep = cp == '-' || py_isspace(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<';
           if (sep) {
             out.push_back(cp);
             at_start = true;
           } else {
             out.push_back(at_start ? py_toupper(cp) : py_tolower(cp));
             at_start = false;
           }
         }
         return Value(utf8::encode(out));
       }},
      {"tojson", do_tojson},
      {"trim", [](const Value& v, const CallArgs& a) { return Value(py_strip(to_str(v), arg_or(a, 0, "chars", Value::none()), true, true)); }},
      {"unique", [](const Value& v, const CallArgs& a) {
         const bool cs = truthy(arg_or(a, 0, "case_sensitive", Value(false)));
         const Value attribute = arg_or(a, 1, "attribute", Value());
         std::vector<Value> out, seen;
         for (const Value& item : iterate(v)) {
           const Value k = sort_key(attribute.is_undefined() ? item : attr_lookup(item, attribute), cs);
           if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
             seen.push_back(k);
             out.push_back(item);
           }
         }
         return Value::list(std::move(out));
       }},
      {"upper", [](const Value& v, const CallArgs&) { return Value(py_upper(to_str(v))); }},
      {"wordcount", [](const Value& v, const CallArgs&) {
         int64_t n = 0;
         bool in_word = false;
         for (char32_t cp : utf8::decode(to_str(v))) {
           const bool w = py_isalpha(cp) || py_isdigit(cp) || cp == '_' || cp > 0x7F;
           if (w && !in_word) ++n;
           in_word = w;
         }
         return Value(n);
       }},
  };
  return *filters;
}

const std::string& canonical(const std::string& name) {
  static const auto* aliases = new std::unordered_map<std::string, std::string>{
      {"d", "default"}, {"e", "escape"}, {"count", "length"}};
  auto it = aliases->find(name);
  return it == aliases->end() ? name : it->second;
}

}  // namespace

bool has_filter(std::string_view name) { return registry().count(canonical(std::string(name))) != 0; }

Value call_filter(const std::string& name, const Value& v, const CallArgs& args) {
  auto it = registry().find(canonical(name));
  if (it == registry().end()) throw RenderError(RenderError::Kind::kRuntime, "No filter named '" + name + "'.");
  return it->second(v, args);
}

}  // namespace rlm::jinja
