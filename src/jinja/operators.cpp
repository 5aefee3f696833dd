#include "jinja/operators.h"

#include <cmath>

#include "core/utf8.h"
#include "jinja/methods.h"

namespace rlm::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw_type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return seq.is_markup() ? Value::markup(out) : Value(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

// Python ints are unbounded; ours are 64-bit, so overflow is an error rather than a wrapped value.
[[noreturn]] void overflow() {
  throw RenderError(RenderError::Kind::kValue, "integer overflow: the result does not fit in 64 bits");
}

template <typename Op>
Value checked_int(Op op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) overflow();
  return Value(r);
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    const bool fl = a.is_float() || b.is_float();
    const int64_t x = a.as_int(), y = b.as_int();
    auto add = [](int64_t p, int64_t q, int64_t* r) { return __builtin_add_overflow(p, q, r); };
    auto sub = [](int64_t p, int64_t q, int64_t* r) { return __builtin_sub_overflow(p, q, r); };
    auto mul = [](int64_t p, int64_t q, int64_t* r) { return __builtin_mul_overflow(p, q, r); };
    if (op == "+") return fl ? Value(a.as_double() + b.as_double()) : checked_int(add, x, y);
    if (op == "-") return fl ? Value(a.as_double() - b.as_double()) : checked_int(sub, x, y);
    if (op == "*") return fl ? Value(a.as_double() * b.as_double()) : checked_int(mul, x, y);
    if (op == "/") {
      if (b.as_double() == 0) {
        throw RenderError(RenderError::Kind::kZeroDivision, fl ? "float division by zero" : "division by zero");
      }
      return Value(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) {  // CPython 3.11 wording
        const char* msg = op == "%" ? (fl ? "float modulo" : "integer modulo by zero")
                                    : (fl ? "float floor division by zero" : "integer division or modulo by zero");
        throw RenderError(RenderError::Kind::kZeroDivision, msg);
      }
      if (!fl) {
        const int64_t q = floor_div(a.as_int(), b.as_int());
        return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
      }
      const double q = std::floor(a.as_double() / b.as_double());
      return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    if (op == "**") {
      if (!fl && b.as_int() >= 0) {
        int64_t p = 1;
        for (int64_t i = 0; i < b.as_int(); ++i) {
          if (__builtin_mul_overflow(p, a.as_int(), &p)) overflow();
          if (p == 0 || p == 1) break;  // 0**n and 1**n settle immediately
        }
        return Value(p);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
  }
  if (op == "+") {
    if (a.is_markup() || b.is_markup()) {
      if (a.is_string() && b.is_string()) {
        return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                             (b.is_markup() ? b.str() : html_escape(b.str())));
      }
      unsupported(op, a, b);
    }
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string()) throw_type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is_list()) {
      throw_type_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(b, a.as_int());
  }
  if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) {
    throw_type_error("can't multiply sequence by non-int of type '" + type_name(a.is_string() || a.is_list() ? b : a) + "'");
  }
  if (op == "%" && a.is_string()) throw_type_error("printf-style string formatting is not supported");
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  require_defined(v);
  if (v.is_float()) return Value(-v.as_double());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) overflow();
    return Value(-v.as_int());
  }
  throw_type_error("bad operand type for unary -: '" + type_name(v) + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      require_defined(item);
      throw_type_error("'in <string>' requires string as left operand, not " + type_name(item));
    }
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.items()) {
      if (equals(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) {
    if (item.is_list() && !item.is_tuple()) throw_type_error("unhashable type: 'list'");
    return container.dict_data().find(item) != nullptr;
  }
  if (container.is_undefined()) return false;
  throw_type_error("argument of type '" + type_name(container) + "' is not iterable");
}

namespace {

std::string object_desc(const Value& obj) {
  if (obj.is_none()) return "None";
  if (obj.is_namespace()) return std::string(obj.dict_data().py_class) + " object";
  return type_name(obj) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(repr(Value(object_desc(obj))) + " has no attribute " + repr(Value(name)));
}

Value missing_element(const Value& obj, const Value& key) {
  return Value::undefined(object_desc(obj) + " has no element " + repr(key));
}

// Python-style index normalisation; returns false when out of range.
bool normalize_index(int64_t& i, int64_t n) {
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (obj.is_namespace()) {
    const Value* v = obj.dict_data().find(name);
    return v ? *v : missing_attribute(obj, name);
  }
  if (std::optional<Value> method = bound_method(obj, name)) return *method;
  if (obj.is_dict()) {
    const Value* v = obj.dict_data().find(name);
    return v ? *v : missing_attribute(obj, name);
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.dict_data().find(key)) return *v;
    if (key.is_string()) return get_attr(obj, key.str());
    return missing_element(obj, key);
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      if (!normalize_index(i, static_cast<int64_t>(obj.items().size()))) {
        return missing_element(obj, key);
      }
      return obj.items()[static_cast<size_t>(i)];
    }
    const std::u32string cps = utf8::decode(obj.str());
    if (!normalize_index(i, static_cast<int64_t>(cps.size()))) {
      return missing_element(obj, key);
    }
    return Value(utf8::encode(cps.substr(static_cast<size_t>(i), 1)));
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return missing_element(obj, key);
}

Value slice(const Value& obj, const std::optional<int64_t>& start_in, const std::optional<int64_t>& stop_in,
            const std::optional<int64_t>& step_in) {
  require_defined(obj);
  if (!obj.is_list() && !obj.is_string()) throw_type_error("'" + type_name(obj) + "' object is not subscriptable");
  const int64_t step = step_in.value_or(1);
  if (step == 0) throw RenderError(RenderError::Kind::kValue, "slice step cannot be zero");
  std::u32string cps;
  int64_t n = 0;
  if (obj.is_string()) {
    cps = utf8::decode(obj.str());
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t start = adjust(start_in, step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(stop_in, step < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(cps[static_cast<size_t>(i)]);
    return Value(utf8::encode(out));
  }
  std::vector<Value> out;
  for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      for (const auto& kv : v.dict_data().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t cp : utf8::decode(v.str())) chars.emplace_back(utf8::encode(std::u32string(1, cp)));
      return chars;
    }
    default: break;
  }
  throw_type_error("'" + type_name(v) + "' object is not iterable");
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8::length(v.str()));
    case Value::Kind::kList: return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.dict_data().items.size());
      break;
    default: break;
  }
  throw_type_error("object of type '" + type_name(v) + "' has no len()");
}

}  // namespace rlm::jinja
