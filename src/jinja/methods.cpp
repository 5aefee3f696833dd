#include "jinja/methods.h"

#include <algorithm>

#include "core/utf8.h"
#include "jinja/operators.h"
#include "jinja/py_str.h"

namespace rlm::jinja {

namespace {

// Decodes the code point starting at byte `i` (setting `len`), or ending just before byte `i`.
char32_t decode_at(const std::string& s, size_t i, size_t* len) {
  const std::u32string one = utf8::decode(std::string_view(s).substr(i, std::min<size_t>(4, s.size() - i)));
  char32_t cp = one.empty() ? 0xFFFD : one[0];
  size_t n = 1;
  const auto c = static_cast<unsigned char>(s[i]);
  if (c >= 0xF0) n = 4;
  else if (c >= 0xE0) n = 3;
  else if (c >= 0xC0) n = 2;
  *len = std::min(n, s.size() - i);
  return cp;
}

char32_t decode_before(const std::string& s, size_t i, size_t* len) {
  size_t b = i - 1;
  while (b > 0 && i - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t n = 0;
  const char32_t cp = decode_at(s, b, &n);
  if (b + n != i) {  // malformed tail: treat the last byte alone
    *len = 1;
    return 0xFFFD;
  }
  *len = n;
  return cp;
}

}  // namespace

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string set;
  const bool use_set = !chars.is_none() && !chars.is_undefined();
  if (use_set) {
    if (!chars.is_string()) throw_type_error("strip arg must be None or str");
    set = utf8::decode(chars.str());
  }
  auto strip_it = [&](char32_t cp) { return use_set ? set.find(cp) != std::u32string::npos : py_isspace(cp); };
  size_t b = 0, e = s.size(), n = 0;
  if (left) {
    while (b < e && strip_it(decode_at(s, b, &n))) b += n;
  }
  if (right) {
    while (e > b && strip_it(decode_before(s, e, &n))) e -= n;
  }
  return s.substr(b, e - b);
}

std::string py_upper(const std::string& s) {
  std::u32string out;
  for (char32_t cp : utf8::decode(s)) {
    if (cp == 0xDF) {
      out += U"SS";  // the one full case mapping common in chat text
    } else {
      out.push_back(py_toupper(cp));
    }
  }
  return utf8::encode(out);
}

std::string py_lower(const std::string& s) {
  std::u32string cps = utf8::decode(s);
  for (char32_t& cp : cps) cp = py_tolower(cp);
  return utf8::encode(cps);
}

std::string py_capitalize(const std::string& s) {
  std::u32string cps = utf8::decode(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? py_toupper(cps[i]) : py_tolower(cps[i]);
  return utf8::encode(cps);
}

std::string py_title(const std::string& s) {
  std::u32string cps = utf8::decode(s);
  bool prev_cased = false;
  for (char32_t& cp : cps) {
    const bool cased = py_isupper(cp) || py_islower(cp);
    if (cased) cp = prev_cased ? py_tolower(cp) : py_toupper(cp);
    prev_cased = cased;
  }
  return utf8::encode(cps);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old.empty()) {
    std::u32string cps = utf8::decode(s);
    int64_t done = 0;
    for (char32_t cp : cps) {
      if (done < count) {
        out += repl;
        ++done;
      }
      utf8::append(out, cp);
    }
    if (done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (done < count) {
    const size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += repl;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep.is_none() || sep.is_undefined()) {
    const std::u32string cps = utf8::decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py_isspace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_isspace(cps[e - 1])) --e;
        parts.push_back(utf8::encode(std::u32string_view(cps).substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_isspace(cps[j])) ++j;
      parts.push_back(utf8::encode(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  if (!sep.is_string()) throw_type_error("must be str or None, not " + type_name(sep));
  if (sep.str().empty()) throw RenderError(RenderError::Kind::kValue, "empty separator");
  size_t pos = 0;
  while (static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t hit = s.find(sep.str(), pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.str().size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  const std::u32string cps = utf8::decode(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    lines.push_back(utf8::encode(std::u32string_view(cps).substr(start, i - start)));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(utf8::encode(std::u32string_view(cps).substr(start)));
  return lines;
}

namespace {

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) throw_type_error(std::string(what) + " must be str, not " + type_name(v));
  return v.str();
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.items()) {
      if (one(need_str(a, "tuple for startswith/endswith"))) return true;
    }
    return false;
  }
  if (!affix.is_string()) {
    throw_type_error(std::string(prefix ? "startswith" : "endswith") +
                     " first arg must be str or a tuple of str, not " + type_name(affix));
  }
  return one(affix.str());
}

int64_t index_of(const std::string& s, const std::string& sub, bool reverse) {
  const size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string::npos) return -1;
  return static_cast<int64_t>(utf8::length(std::string_view(s).substr(0, hit)));
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  const std::u32string cps = utf8::decode(s);
  if (cps.empty()) return false;
  return std::all_of(cps.begin(), cps.end(), pred);
}

std::optional<Value> string_method(const Value& obj, const std::string& name) {
  auto make = [&](auto fn) { return std::optional<Value>(Value::function(name, fn)); };
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return make([obj, prefix](CallArgs& a) {
      const std::string& s = obj.str(); return Value(affix_match(s, arg_or(a, 0, "prefix", Value()), prefix)); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return make([obj, left, right](CallArgs& a) {
      const std::string& s = obj.str(); return Value(py_strip(s, arg_or(a, 0, "chars", Value::none()), left, right)); });
  }
  if (name == "split" || name == "rsplit") {
    const bool rev = name == "rsplit";
    return make([obj, rev](CallArgs& a) {
      const std::string& s = obj.str();
      const Value sep = arg_or(a, 0, "sep", Value::none());
      const Value max = arg_or(a, 1, "maxsplit", Value(-1));
      if (!rev || max.as_int() < 0) return string_list(py_split(s, sep, max.as_int()));
      // rsplit with a limit: split everything, then re-join the leading surplus.
      std::vector<std::string> all = py_split(s, sep, -1);
      if (static_cast<int64_t>(all.size()) <= max.as_int() + 1 || sep.is_none()) return string_list(all);
      const size_t keep = static_cast<size_t>(max.as_int());
      std::string head;
      for (size_t i = 0; i + keep < all.size(); ++i) head += (i ? sep.str() : "") + all[i];
      std::vector<std::string> out{head};
      out.insert(out.end(), all.end() - static_cast<std::ptrdiff_t>(keep), all.end());
      return string_list(out);
    });
  }
  if (name == "splitlines") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return string_list(py_splitlines(s)); });
  if (name == "replace") {
    return make([obj](CallArgs& a) {
      const std::string& s = obj.str();
      return Value(py_replace(s, need_str(arg_or(a, 0, "old", Value()), "replace() argument 1"),
                              need_str(arg_or(a, 1, "new", Value()), "replace() argument 2"),
                              arg_or(a, 2, "count", Value(-1)).as_int()));
    });
  }
  if (name == "upper") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(py_upper(s)); });
  if (name == "lower") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(py_lower(s)); });
  if (name == "title") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(py_title(s)); });
  if (name == "capitalize") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(py_capitalize(s)); });
  if (name == "find" || name == "rfind") {
    const bool rev = name == "rfind";
    return make([obj, rev](CallArgs& a) {
      const std::string& s = obj.str(); return Value(index_of(s, need_str(arg_or(a, 0, "sub", Value()), "find() argument"), rev)); });
  }
  if (name == "count") {
    return make([obj](CallArgs& a) {
      const std::string& s = obj.str();
      const std::string& sub = need_str(arg_or(a, 0, "sub", Value()), "count() argument");
      if (sub.empty()) return Value(static_cast<int64_t>(utf8::length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return make([obj](CallArgs& a) {
      const std::string& s = obj.str();
      std::string out;
      size_t i = 0;
      for (const Value& item : iterate(arg_or(a, 0, "iterable", Value()))) {
        if (!item.is_string()) {
          throw_type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
        }
        if (i++) out += s;
        out += item.str();
      }
      return Value(out);
    });
  }
  if (name == "isdigit") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(all_chars(s, py_isdigit)); });
  if (name == "isalpha") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(all_chars(s, py_isalpha)); });
  if (name == "isspace") return make([obj](CallArgs&) {
      const std::string& s = obj.str(); return Value(all_chars(s, py_isspace)); });
  if (name == "isupper" || name == "islower") {
    const bool upper = name == "isupper";
    return make([obj, upper](CallArgs&) {
      const std::string& s = obj.str();
      bool cased = false;
      for (char32_t cp : utf8::decode(s)) {
        if (upper ? py_islower(cp) : py_isupper(cp)) return Value(false);
        if (upper ? py_isupper(cp) : py_islower(cp)) cased = true;
      }
      return Value(cased);
    });
  }
  return std::nullopt;
}

Value unsafe_method(const Value& obj, const std::string& name) {
  const std::string msg = "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.";
  return Value::function(name, [msg](CallArgs&) -> Value { throw RenderError(RenderError::Kind::kSecurity, msg); });
}

}  // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_dict()) {
    if (name == "items" || name == "keys" || name == "values") {
      return Value::function(name, [obj, name](CallArgs&) {
        std::vector<Value> out;
        for (const auto& [k, v] : obj.dict_data().items) {
          if (name == "items") out.push_back(Value::tuple({k, v}));
          else out.push_back(name == "keys" ? k : v);
        }
        return Value::list(std::move(out));
      });
    }
    if (name == "get") {
      return Value::function(name, [obj](CallArgs& a) {
        const Value key = arg_or(a, 0, "key", Value());
        const Value* v = obj.dict_data().find(key);
        return v ? *v : arg_or(a, 1, "default", Value::none());
      });
    }
    if (name == "copy") {
      return Value::function(name, [obj](CallArgs&) {
        Value copy = Value::dict();
        copy.mutable_dict_data().items = obj.dict_data().items;
        return copy;
      });
    }
    static const char* kMutating[] = {"pop", "popitem", "update", "setdefault", "clear"};
    for (const char* m : kMutating) {
      if (name == m) return unsafe_method(obj, name);
    }
    return std::nullopt;
  }
  if (obj.is_list()) {
    if (name == "index") {
      return Value::function(name, [obj](CallArgs& a) {
        const Value x = arg_or(a, 0, "value", Value());
        for (size_t i = 0; i < obj.items().size(); ++i) {
          if (equals(obj.items()[i], x)) return Value(static_cast<int64_t>(i));
        }
        throw RenderError(RenderError::Kind::kValue, repr(x) + " is not in list");
      });
    }
    if (name == "count") {
      return Value::function(name, [obj](CallArgs& a) {
        const Value x = arg_or(a, 0, "value", Value());
        return Value(static_cast<int64_t>(std::count_if(obj.items().begin(), obj.items().end(),
                                                        [&](const Value& v) { return equals(v, x); })));
      });
    }
    if (!obj.is_tuple()) {
      static const char* kMutating[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
      for (const char* m : kMutating) {
        if (name == m) return unsafe_method(obj, name);
      }
    }
  }
  return std::nullopt;
}

}  // namespace rlm::jinja
