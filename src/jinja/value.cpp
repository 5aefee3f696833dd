#include "jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/utf8.h"
#include "jinja/py_str.h"

namespace rlm::jinja {

const char* RenderError::kind_name() const {
  switch (kind_) {
    case Kind::kRaised: return "TemplateError";
    case Kind::kUndefined: return "UndefinedError";
    case Kind::kType: return "TypeError";
    case Kind::kValue: return "ValueError";
    case Kind::kSecurity: return "SecurityError";
    case Kind::kZeroDivision: return "ZeroDivisionError";
    case Kind::kRuntime: return "TemplateRuntimeError";
  }
  return "Error";
}

Value arg_or(const CallArgs& args, size_t pos, const char* name, Value fallback) {
  if (pos < args.args.size()) return args.args[pos];
  for (const auto& [k, v] : args.kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

void throw_type_error(const std::string& message) { throw RenderError(RenderError::Kind::kType, message); }

const Value* Value::DictData::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

const Value* Value::DictData::find(const Value& key) const {
  if (key.is_string()) return find(key.str());
  for (const auto& [k, v] : items) {
    if (!k.is_string() && equals(k, key)) return &v;
  }
  return nullptr;
}

void Value::DictData::set(const std::string& key, Value value) { set(Value(key), std::move(value)); }

void Value::DictData::set(const Value& key, Value value) {
  if (!key.is_string() && !key.is_number() && !key.is_none() && !key.is_tuple()) {
    throw_type_error("unhashable type: '" + type_name(key) + "'");
  }
  for (auto& [k, v] : items) {
    if (k.is_string() == key.is_string() && equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.str_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

const std::string& Value::empty_string() {
  static const std::string* empty = new std::string();
  return *empty;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListData>();
  v.list_->items = std::move(items);
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_tuple = true;
  return v;
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictData>();
  v.dict_->items.reserve(items.size());
  for (auto& [k, item] : items) v.dict_->items.emplace_back(Value(std::move(k)), std::move(item));
  return v;
}

Value Value::namespace_object(std::vector<std::pair<std::string, Value>> items, const char* py_class) {
  Value v = dict(std::move(items));
  v.dict_->is_namespace = true;
  v.dict_->py_class = py_class;
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.function_ = std::make_shared<FunctionData>(FunctionData{std::move(name), std::move(fn)});
  return v;
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (function_) return function_.get();
  return nullptr;
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: return !v.items().empty();
    case Value::Kind::kDict: return v.is_namespace() || !v.dict_data().items.empty();
    case Value::Kind::kFunction: return true;
  }
  return false;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out;
  if (decpt > 16 || decpt < -3) {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += eb;
  } else if (decpt <= 0) {
    out = "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= n) {
    out = digits + std::string(decpt - n, '0') + ".0";
  } else {
    out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return sign + out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8::decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!py_isprintable(cp)) {
      char buf[16];
      if (cp < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      else if (cp < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      utf8::append(out, cp);
    }
  }
  out.push_back(quote);
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString: return repr_string(v.str());
    case Value::Kind::kList: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        out += repr(v.items()[i]);
      }
      if (v.is_tuple() && v.items().size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      if (v.is_namespace()) {
        std::string out = "<Namespace {";
        bool first = true;
        for (const auto& [k, item] : v.dict_data().items) {
          if (!first) out += ", ";
          first = false;
          out += repr(k) + ": " + repr(item);
        }
        return out + "}>";
      }
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.dict_data().items) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(item);
      }
      return out + "}";
    }
    case Value::Kind::kUndefined: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return py_float_repr(v.as_double());
    case Value::Kind::kString: return v.str();
    case Value::Kind::kList:
    case Value::Kind::kDict: return repr(v);
    case Value::Kind::kFunction: return "<function " + v.function_data().name + ">";
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict: {
      const std::string cls = v.dict_data().py_class;
      return cls.substr(cls.rfind('.') + 1);
    }
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

void require_defined(const Value& v) {
  if (v.is_undefined()) throw RenderError(RenderError::Kind::kUndefined, v.str());
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!equals(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return a.identity() == b.identity();
      const auto& da = a.dict_data().items;
      if (da.size() != b.dict_data().items.size()) return false;
      for (const auto& [k, item] : da) {
        const Value* other = b.dict_data().find(k);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) require_defined(a);
  if (b.is_undefined()) require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order equals code point order.
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const size_t n = std::min(a.items().size(), b.items().size());
    for (size_t i = 0; i < n; ++i) {
      if (!equals(a.items()[i], b.items()[i])) return compare(a.items()[i], b.items()[i], op);
    }
    return a.items().size() < b.items().size() ? -1 : (a.items().size() > b.items().size() ? 1 : 0);
  }
  throw_type_error(std::string("'") + op + "' not supported between instances of '" + type_name(a) +
                   "' and '" + type_name(b) + "'");
}

namespace {

template <typename Json>
Value from_json_impl(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        throw RenderError(RenderError::Kind::kValue, "integer " + std::to_string(u) + " does not fit in 64 bits");
      }
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_impl(item));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json_impl(it.value()));
      return Value::dict(std::move(items));
    }
    default: return Value::none();  // binary / discarded never come out of a JSON parse
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

}  // namespace rlm::jinja
