#include "jinja/globals.h"

#include <vector>

namespace rlm::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Value range_fn(CallArgs& a) {
  if (!a.kwargs.empty()) throw_type_error("range() takes no keyword arguments");
  for (const Value& v : a.args) {
    require_defined(v);
    if (!v.is_int() && !v.is_bool()) throw_type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  }
  int64_t start = 0, stop = 0, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else if (a.args.size() == 2 || a.args.size() == 3) {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  } else {
    throw_type_error("range expected 1 to 3 arguments, got " + std::to_string(a.args.size()));
  }
  if (step == 0) throw RenderError(RenderError::Kind::kValue, "range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      throw RenderError(RenderError::Kind::kSecurity,
                        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) as Python builds it: an optional mapping or pair list, then keywords.
Value dict_from_args(const CallArgs& a, const char* what) {
  Value d = Value::dict();
  if (a.args.size() > 1) throw_type_error(std::string(what) + " expected at most 1 positional argument");
  if (a.args.size() == 1) {
    const Value& src = a.args[0];
    require_defined(src);
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict_data().items) d.mutable_dict_data().set(k, v);
    } else if (src.is_list()) {
      for (const Value& pair : src.items()) {
        if (!pair.is_list() || pair.items().size() != 2) {
          throw_type_error(std::string(what) + " sequence elements must be (key, value) pairs");
        }
        d.mutable_dict_data().set(pair.items()[0], pair.items()[1]);
      }
    } else {
      throw_type_error("'" + type_name(src) + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : a.kwargs) d.mutable_dict_data().set(k, v);
  return d;
}

}  // namespace

std::string py_strftime(const std::string& format, const std::tm& tm) {
  if (format.empty()) return "";
  std::vector<char> buf(format.size() * 8 + 64);
  while (true) {
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    if (n > 0 || buf.size() > 65536) return std::string(buf.data(), n);
    buf.resize(buf.size() * 4);
  }
}

std::unordered_map<std::string, Value> make_globals(const RenderOptions& options) {
  std::unordered_map<std::string, Value> g;
  g["range"] = Value::function("range", range_fn);
  g["dict"] = Value::function("dict", [](CallArgs& a) { return dict_from_args(a, "dict"); });
  g["namespace"] = Value::function("namespace", [](CallArgs& a) {
    const Value d = dict_from_args(a, "namespace");
    std::vector<std::pair<std::string, Value>> items;
    for (const auto& [key, v] : d.dict_data().items) {
      const std::string k = to_str(key);
      items.emplace_back(k, v);
      if (!k.empty() && k[0] == '_') {
        throw RenderError(RenderError::Kind::kSecurity,
                          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k +
                              "'. Please rename the attribute.");
      }
    }
    return Value::namespace_object(std::move(items));
  });
  g["joiner"] = Value::function("joiner", [](CallArgs& a) {
    const std::string sep = to_str(arg_or(a, 0, "sep", Value(", ")));
    auto used = std::make_shared<bool>(false);
    return Value::function("joiner", [sep, used](CallArgs&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  });
  g["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
    throw RenderError(RenderError::Kind::kRaised, to_str(arg_or(a, 0, "message", Value(""))));
  });
  auto now = options.now;
  g["strftime_now"] = Value::function("strftime_now", [now](CallArgs& a) {
    const Value fmt = arg_or(a, 0, "format", Value());
    if (!fmt.is_string()) throw_type_error("strftime() argument 1 must be str, not " + type_name(fmt));
    std::tm tm{};
    if (now) {
      tm = now();
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    return Value(py_strftime(fmt.str(), tm));
  });
  return g;
}

}  // namespace rlm::jinja
