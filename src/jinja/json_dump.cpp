#include "jinja/json_dump.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/utf8.h"

namespace rlm::jinja {
namespace {

void dump_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  for (char32_t cp : utf8::decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                          static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
          }
          out += buf;
        } else {
          utf8::append(out, cp);
        }
      }
    }
  }
  out.push_back('"');
}

// json.dumps turns non-string keys into their JSON scalar spelling.
std::string key_string(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_int()) return std::to_string(k.as_int());
  if (k.is_float()) return py_float_repr(k.as_double());
  if (k.is_none()) return "null";
  throw_type_error("keys must be str, int, float, bool or None, not " + type_name(k));
}

struct Dumper {
  const JsonDumpOptions& opt;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  void newline(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *opt.indent;
  }

  void dump(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
      case Value::Kind::kFloat: {
        const double d = v.as_double();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += py_float_repr(d);
        return;
      }
      case Value::Kind::kString: dump_string(v.str(), opt.ensure_ascii, out); return;
      case Value::Kind::kList: {
        if (v.items().empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t i = 0; i < v.items().size(); ++i) {
          if (i) out += item_sep;
          if (opt.indent) newline(level + 1);
          dump(v.items()[i], level + 1);
        }
        if (opt.indent) newline(level);
        out.push_back(']');
        return;
      }
      case Value::Kind::kDict: {
        if (v.is_namespace()) break;
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict_data().items) items.push_back(&kv);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (opt.sort_keys) {
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
        }
        out.push_back('{');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (opt.indent) newline(level + 1);
          dump_string(key_string(items[i]->first), opt.ensure_ascii, out);
          out += key_sep;
          dump(items[i]->second, level + 1);
        }
        if (opt.indent) newline(level);
        out.push_back('}');
        return;
      }
      default: break;
    }
    const std::string name = v.is_undefined() ? "Undefined" : type_name(v);
    throw_type_error("Object of type " + name + " is not JSON serializable");
  }
};

}  // namespace

std::string py_json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d{options, options.indent ? "," : ", ", ": ", {}};
  if (options.separators) {
    d.item_sep = options.separators->first;
    d.key_sep = options.separators->second;
  }
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace rlm::jinja
