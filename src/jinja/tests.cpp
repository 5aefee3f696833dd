#include "jinja/tests.h"

#include <cmath>
#include <functional>
#include <unordered_map>

#include "core/utf8.h"
#include "jinja/filters.h"
#include "jinja/operators.h"
#include "jinja/py_str.h"

namespace rlm::jinja {
namespace {

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const Value& arg(const CallArgs& args, size_t i, const char* test) {
  if (i < args.args.size()) return args.args[i];
  if (!args.kwargs.empty() && i == 0) return args.kwargs[0].second;
  throw_type_error(std::string("test '") + test + "' is missing a required argument");
}

bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

bool str_case_test(const Value& v, bool upper) {
  bool cased = false;
  for (char32_t cp : utf8::decode(to_str(v))) {
    if (upper ? py_islower(cp) : py_isupper(cp)) return false;
    if (upper ? py_isupper(cp) : py_islower(cp)) cased = true;
  }
  return cased;
}

int64_t int_arg(const Value& v) {
  if (!v.is_int() && !v.is_bool()) throw_type_error("expected an integer, got '" + type_name(v) + "'");
  return v.as_int();
}

const std::unordered_map<std::string, TestFn>& registry() {
  static const auto* tests = new std::unordered_map<std::string, TestFn>{
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"boolean", [](const Value& v, const CallArgs&) { return v.is_bool(); }},
      {"false", [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"true", [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"integer", [](const Value& v, const CallArgs&) { return v.is_int(); }},
      {"float", [](const Value& v, const CallArgs&) { return v.is_float(); }},
      {"number", [](const Value& v, const CallArgs&) { return v.is_number(); }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict(); }},
      {"iterable", [](const Value& v, const CallArgs&) { return is_iterable(v); }},
      {"sequence", [](const Value& v, const CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); }},
      {"callable", [](const Value& v, const CallArgs&) { return v.is_function(); }},
      {"escaped", [](const Value&, const CallArgs&) { return false; }},
      {"lower", [](const Value& v, const CallArgs&) { return str_case_test(v, false); }},
      {"upper", [](const Value& v, const CallArgs&) { return str_case_test(v, true); }},
      {"odd", [](const Value& v, const CallArgs&) { return int_arg(v) % 2 != 0; }},
      {"even", [](const Value& v, const CallArgs&) { return int_arg(v) % 2 == 0; }},
      {"divisibleby", [](const Value& v, const CallArgs& a) {
         const int64_t d = int_arg(arg(a, 0, "divisibleby"));
         if (d == 0) throw RenderError(RenderError::Kind::kZeroDivision, "integer division or modulo by zero");
         return int_arg(v) % d == 0;
       }},
      {"eq", [](const Value& v, const CallArgs& a) { return equals(v, arg(a, 0, "eq")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return !equals(v, arg(a, 0, "ne")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return compare(v, arg(a, 0, "lt"), "<") < 0; }},
      {"le", [](const Value& v, const CallArgs& a) { return compare(v, arg(a, 0, "le"), "<=") <= 0; }},
      {"gt", [](const Value& v, const CallArgs& a) { return compare(v, arg(a, 0, "gt"), ">") > 0; }},
      {"ge", [](const Value& v, const CallArgs& a) { return compare(v, arg(a, 0, "ge"), ">=") >= 0; }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(arg(a, 0, "in"), v); }},
      {"sameas", [](const Value& v, const CallArgs& a) {
         const Value& o = arg(a, 0, "sameas");
         if (v.kind() != o.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.identity() != nullptr) return v.identity() == o.identity();
         return equals(v, o);
       }},
      {"filter", [](const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.str()); }},
      {"test", [](const Value& v, const CallArgs&) { return v.is_string() && has_test(v.str()); }},
  };
  return *tests;
}

const std::unordered_map<std::string, std::string>& aliases() {
  static const auto* a = new std::unordered_map<std::string, std::string>{
      {"equalto", "eq"}, {"==", "eq"}, {"!=", "ne"}, {"lessthan", "lt"}, {"<", "lt"}, {"<=", "le"},
      {"greaterthan", "gt"}, {">", "gt"}, {">=", "ge"}};
  return *a;
}

const std::string& canonical(const std::string& name) {
  auto it = aliases().find(name);
  return it == aliases().end() ? name : it->second;
}

}  // namespace

bool has_test(std::string_view name) {
  const std::string n(name);
  return registry().count(canonical(n)) != 0;
}

bool call_test(const std::string& name, const Value& v, const CallArgs& args) {
  auto it = registry().find(canonical(name));
  if (it == registry().end()) throw RenderError(RenderError::Kind::kRuntime, "No test named '" + name + "'.");
  return it->second(v, args);
}

}  // namespace rlm::jinja
