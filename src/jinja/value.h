// The value model of the template interpreter, mirroring the Python objects jinja2 sees when
// transformers renders a chat template: None, bool, int, float, str, list, tuple, dict (insertion
// ordered), jinja2's Undefined, namespace() objects and callables (macros, builtins, bound methods).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rlm::jinja {

class Value;

// Positional and keyword arguments of a call, in source order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

using Function = std::function<Value(CallArgs&)>;

// Argument `pos` if given positionally, else keyword `name`, else `fallback`.
Value arg_or(const CallArgs& args, size_t pos, const char* name, Value fallback);

// Raised while rendering; Template::render turns it into a Status. kRaised is the template's own
// raise_exception(message); the others mirror the Python exception classes jinja2 would raise.
class RenderError : public std::runtime_error {
 public:
  enum class Kind { kRaised, kUndefined, kType, kValue, kSecurity, kZeroDivision, kRuntime };
  RenderError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }
  const char* kind_name() const;

 private:
  Kind kind_;
};

[[noreturn]] void throw_type_error(const std::string& message);

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  struct ListData {
    std::vector<Value> items;
    bool is_tuple = false;
  };
  struct DictData {
    // Insertion order, like a Python dict. Keys are str in JSON data; template literals may use
    // any hashable value (int, float, bool, None, tuple).
    std::vector<std::pair<Value, Value>> items;
    // Attribute bags (namespace(), the for-loop `loop`) instead of a dict; py_class is the Python
    // class jinja2 error messages name.
    bool is_namespace = false;
    const char* py_class = "dict";
    const Value* find(const std::string& key) const;
    const Value* find(const char* key) const { return find(std::string(key)); }
    const Value* find(const Value& key) const;  // Python key equality (1 == 1.0 == True)
    void set(const std::string& key, Value value);
    void set(const char* key, Value value) { set(std::string(key), std::move(value)); }
    void set(const Value& key, Value value);
  };
  struct FunctionData {
    std::string name;
    Function fn;
  };

  Value() = default;  // Undefined
  Value(bool b) : kind_(Kind::kBool), int_(b) {}                   // NOLINT
  Value(int v) : kind_(Kind::kInt), int_(v) {}                     // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}                 // NOLINT
  Value(double v) : kind_(Kind::kFloat), float_(v) {}              // NOLINT
  Value(std::string s) : kind_(Kind::kString), str_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT

  // `hint` is the UndefinedError message raised when the value is used in a way that needs it.
  static Value undefined(std::string hint);
  static Value none();
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict(std::vector<std::pair<std::string, Value>> items = {});
  static Value namespace_object(std::vector<std::pair<std::string, Value>> items,
                                const char* py_class = kNamespaceClass);
  static constexpr const char* kNamespaceClass = "transformers.utils.chat_template_utils.TemplateNamespace";
  static Value function(std::string name, Function fn);
  // markupsafe.Markup: a string marked safe (`|safe`, `|escape`). Concatenating it with a plain
  // string HTML-escapes the plain side, as Python does even with autoescape off.
  static Value markup(std::string s);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool, int and float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return is_string() && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }  // list or tuple
  bool is_tuple() const { return is_list() && list_->is_tuple; }
  bool is_dict() const { return kind_ == Kind::kDict && !dict_->is_namespace; }
  bool is_namespace() const { return kind_ == Kind::kDict && dict_->is_namespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // int or bool
  double as_double() const { return is_float() ? float_ : static_cast<double>(int_); }
  // String contents, or an Undefined's hint. Shared, so copying a Value never copies the text.
  const std::string& str() const { return str_ ? *str_ : empty_string(); }
  const std::vector<Value>& items() const { return list_->items; }
  const DictData& dict_data() const { return *dict_; }
  DictData& mutable_dict_data() const { return *dict_; }
  const FunctionData& function_data() const { return *function_; }
  const void* identity() const;  // for `is sameas` on containers

 private:
  Kind kind_ = Kind::kUndefined;
  bool markup_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  static const std::string& empty_string();
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<FunctionData> function_;
};

// Python truthiness (Undefined is falsy).
bool truthy(const Value& v);
// Python str(): what `{{ v }}` prints. Undefined prints as "".
std::string to_str(const Value& v);
// Python repr(), used for containers inside str().
std::string repr(const Value& v);
// Python float.__repr__ (shortest round-trip digits).
std::string py_float_repr(double d);
// The name jinja2 puts in messages: "dict", "list", "str", "int", "NoneType", ...
std::string type_name(const Value& v);
// Python == (1 == 1.0 == True; list != tuple; dicts compare regardless of order).
bool equals(const Value& a, const Value& b);
// Python ordering (<0, 0, >0); raises TypeError for unorderable pairs, as Python does.
int compare(const Value& a, const Value& b, const char* op = "<");
// Throws UndefinedError if `v` is Undefined (for operations jinja2's Undefined refuses).
void require_defined(const Value& v);

// Converts parsed JSON (either flavour) into template values; object key order is kept for
// ordered_json and is alphabetical for nlohmann::json. Throws RenderError for integers beyond
// int64 (Python would keep them exact; we refuse rather than wrap).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

}  // namespace rlm::jinja
