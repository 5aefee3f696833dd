#include "jinja/interpreter.h"

#include "jinja/filters.h"
#include "jinja/globals.h"
#include "jinja/operators.h"
#include "jinja/tests.h"

namespace rlm::jinja {
namespace {

constexpr int kMaxMacroDepth = 200;

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_int() && !v.is_bool()) throw_type_error("slice indices must be integers or None");
  return v.as_int();
}

}  // namespace

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

std::string Interpreter::render(const NodeList& nodes, const Value& context) {
  auto globals = std::make_shared<Scope>(nullptr);
  for (auto& [k, v] : make_globals(options_)) globals->set(k, std::move(v));
  auto root = std::make_shared<Scope>(globals);
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict_data().items) root->set(to_str(k), v);
  }
  std::string out;
  exec_list(nodes, root, out);
  return out;
}

Interpreter::Flow Interpreter::exec_list(const NodeList& nodes, const ScopePtr& scope, std::string& out) {
  for (const auto& n : nodes) {
    const Flow f = exec(*n, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Node& node, const ScopePtr& scope, std::string& out) {
  line_ = node.line;
  switch (node.kind) {
    case NodeKind::kText: out += node.text; return Flow::kNormal;
    case NodeKind::kOutput: out += to_str(eval(*node.expr, scope)); return Flow::kNormal;
    case NodeKind::kIf:
      for (const auto& [cond, body] : node.branches) {
        if (truthy(eval(*cond, scope))) return exec_list(body, scope, out);
      }
      return exec_list(node.else_body, scope, out);
    case NodeKind::kFor: return exec_for(node, scope, out);
    case NodeKind::kSet: exec_set(node, scope); return Flow::kNormal;
    case NodeKind::kSetBlock: {
      std::string body;
      exec_list(node.body, std::make_shared<Scope>(scope), body);
      Value v(std::move(body));
      if (node.expr) v = apply_filters(*node.expr, v, scope);
      if (!node.attr_target.empty()) assign_attribute(node, std::move(v), *scope);
      else scope->set(node.targets[0], v);
      return Flow::kNormal;
    }
    case NodeKind::kMacro: scope->set(node.text, make_macro(node, scope)); return Flow::kNormal;
    case NodeKind::kCallBlock: {
      const Expr& call = *node.expr;
      Value callee = eval(*call.args[0], scope);
      require_defined(callee);
      if (!callee.is_function()) throw_type_error("'" + type_name(callee) + "' object is not callable");
      CallArgs args = eval_args(call, 1, scope);
      args.kwargs.emplace_back("caller", make_macro(node, scope));
      out += to_str(callee.function_data().fn(args));
      return Flow::kNormal;
    }
    case NodeKind::kFilterBlock: {
      std::string body;
      exec_list(node.body, std::make_shared<Scope>(scope), body);
      out += to_str(apply_filters(*node.expr, Value(std::move(body)), scope));
      return Flow::kNormal;
    }
    case NodeKind::kScope: return exec_list(node.body, scope, out);
    case NodeKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (size_t i = 0; i < node.params.size(); ++i) inner->set(node.params[i], eval(*node.defaults[i], scope));
      return exec_list(node.body, inner, out);
    }
    case NodeKind::kBreak: return Flow::kBreak;
    case NodeKind::kContinue: return Flow::kContinue;
  }
  return Flow::kNormal;
}

void Interpreter::bind_targets(const std::vector<std::string>& targets, const Value& value, Scope& scope) {
  if (targets.size() == 1) {
    scope.set(targets[0], value);
    return;
  }
  require_defined(value);
  const std::vector<Value> parts = iterate(value);
  if (parts.size() < targets.size()) {
    throw RenderError(RenderError::Kind::kValue, "not enough values to unpack (expected " +
                                                     std::to_string(targets.size()) + ", got " +
                                                     std::to_string(parts.size()) + ")");
  }
  if (parts.size() > targets.size()) {
    throw RenderError(RenderError::Kind::kValue,
                      "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], parts[i]);
}

Interpreter::Flow Interpreter::exec_for(const Node& node, const ScopePtr& scope, std::string& out) {
  const Value iterable = eval(*node.expr, scope);
  if (iterable.is_none() || iterable.is_number() || iterable.is_function() || iterable.is_namespace()) {
    throw_type_error("'" + type_name(iterable) + "' object is not iterable");
  }
  std::vector<Value> items = iterate(iterable);
  if (node.cond) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      auto probe = std::make_shared<Scope>(scope);
      bind_targets(node.targets, item, *probe);
      if (truthy(eval(*node.cond, probe))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_list(node.else_body, std::make_shared<Scope>(scope), out);
    return Flow::kNormal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  auto last_changed = std::make_shared<std::optional<Value>>();  // loop.changed() state
  for (int64_t i = 0; i < n; ++i) {
    auto iter_scope = std::make_shared<Scope>(scope);
    bind_targets(node.targets, items[static_cast<size_t>(i)], *iter_scope);
    Value loop = Value::namespace_object({
        {"index", Value(i + 1)},
        {"index0", Value(i)},
        {"revindex", Value(n - i)},
        {"revindex0", Value(n - i - 1)},
        {"first", Value(i == 0)},
        {"last", Value(i == n - 1)},
        {"length", Value(n)},
        {"depth", Value(1)},
        {"depth0", Value(0)},
        {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item")},
        {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item")},
        {"cycle", Value::function("cycle", [i](CallArgs& a) {
           if (a.args.empty()) throw_type_error("no items for cycling given");
           return a.args[static_cast<size_t>(i) % a.args.size()];
         })},
        {"changed", Value::function("changed", [last_changed](CallArgs& a) {
           Value now = Value::list(a.args);
           if (last_changed->has_value() && equals(**last_changed, now)) return Value(false);
           *last_changed = std::move(now);
           return Value(true);
         })},
    }, "jinja2.runtime.LoopContext");
    iter_scope->set("loop", loop);
    const Flow f = exec_list(node.body, iter_scope, out);
    if (f == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::exec_set(const Node& node, const ScopePtr& scope) {
  Value v = eval(*node.expr, scope);
  if (!node.attr_target.empty()) {
    assign_attribute(node, std::move(v), *scope);
    return;
  }
  bind_targets(node.targets, v, *scope);
}

void Interpreter::assign_attribute(const Node& node, Value v, const Scope& scope) {
  {
    const Value* ns = scope.lookup(node.attr_target);
    if (!ns || !ns->is_namespace() || std::string_view(ns->dict_data().py_class) != Value::kNamespaceClass) {
      throw RenderError(RenderError::Kind::kRuntime, "cannot assign attribute on non-namespace object");
    }
    if (!node.text.empty() && node.text[0] == '_') {
      throw RenderError(RenderError::Kind::kSecurity,
                        "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
                            node.text + "'. Please rename the attribute.");
    }
    ns->mutable_dict_data().set(node.text, std::move(v));
  }
}

Value Interpreter::make_macro(const Node& node, const ScopePtr& scope) {
  const Node* def = &node;
  const std::string name = node.kind == NodeKind::kMacro ? node.text : "caller";
  // The scope usually stores this macro: a strong reference here would be a cycle (see interpreter.h).
  if (macro_scopes_.empty() || macro_scopes_.back() != scope) macro_scopes_.push_back(scope);
  std::weak_ptr<Scope> defining = scope;
  return Value::function(name, [this, def, defining, name](CallArgs& a) {
    if (depth_ >= kMaxMacroDepth) throw RenderError(RenderError::Kind::kValue, "maximum macro recursion depth exceeded");
    ScopePtr parent = defining.lock();
    if (!parent) throw RenderError(RenderError::Kind::kRuntime, "macro '" + name + "' called after its render ended");
    auto s = std::make_shared<Scope>(std::move(parent));
    const size_t np = def->params.size();
    std::vector<Value> varargs;
    for (size_t i = np; i < a.args.size(); ++i) varargs.push_back(a.args[i]);
    std::vector<std::pair<std::string, Value>> extra_kwargs;
    for (const auto& [k, v] : a.kwargs) {
      bool is_param = false;
      for (size_t i = 0; i < np; ++i) is_param = is_param || def->params[i] == k;
      if (k == "caller") s->set("caller", v);
      else if (!is_param) extra_kwargs.emplace_back(k, v);
    }
    for (size_t i = 0; i < np; ++i) {
      const std::string& p = def->params[i];
      Value v;
      bool found = i < a.args.size();
      if (found) v = a.args[i];
      for (const auto& [k, kv] : a.kwargs) {
        if (k == p) {
          if (found) throw_type_error("macro '" + name + "' got multiple values for argument '" + p + "'");
          v = kv;
          found = true;
        }
      }
      if (!found) v = def->defaults[i] ? eval(*def->defaults[i], s) : Value::undefined("parameter '" + p + "' was not provided");
      s->set(p, v);
    }
    s->set("varargs", Value::list(std::move(varargs)));
    s->set("kwargs", Value::dict(std::move(extra_kwargs)));
    const int saved_line = line_;
    ++depth_;
    std::string out;
    try {
      exec_list(def->body, s, out);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    line_ = saved_line;
    return Value(std::move(out));
  });
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.args.push_back(eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v, scope));
  return args;
}

Value Interpreter::apply_filters(const Expr& e, const Value& innermost, const ScopePtr& scope) {
  // args[0] is the filtered expression; null at the bottom of a {% filter %} / {% set | f %} chain.
  Value operand = innermost;
  if (e.args[0]) {
    operand = e.args[0]->kind == ExprKind::kFilter ? apply_filters(*e.args[0], innermost, scope) : eval(*e.args[0], scope);
  }
  return call_filter(e.name, operand, eval_args(e, 1, scope));
}

Value Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.args[0], scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i + 1], scope);
    const std::string& op = e.ops[i];
    bool ok = false;
    if (op == "==") ok = equals(left, right);
    else if (op == "!=") ok = !equals(left, right);
    else if (op == "<") ok = compare(left, right, "<") < 0;
    else if (op == "<=") ok = compare(left, right, "<=") <= 0;
    else if (op == ">") ok = compare(left, right, ">") > 0;
    else if (op == ">=") ok = compare(left, right, ">=") >= 0;
    else if (op == "in") ok = contains(right, left);
    else ok = !contains(right, left);  // notin
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral: return e.value;
    case ExprKind::kName: {
      const Value* v = scope->lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.args[0], scope), e.name);
    case ExprKind::kGetItem: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
    case ExprKind::kSlice: {
      const Value obj = eval(*e.args[0], scope);
      std::optional<int64_t> b[3];
      for (int i = 0; i < 3; ++i) {
        if (e.args[i + 1]) b[i] = slice_bound(eval(*e.args[i + 1], scope));
      }
      return slice(obj, b[0], b[1], b[2]);
    }
    case ExprKind::kCall: {
      const Value callee = eval(*e.args[0], scope);
      require_defined(callee);
      if (!callee.is_function()) throw_type_error("'" + type_name(callee) + "' object is not callable");
      CallArgs args = eval_args(e, 1, scope);
      return callee.function_data().fn(args);
    }
    case ExprKind::kFilter: return apply_filters(e, Value(), scope);
    case ExprKind::kTest: {
      const Value operand = eval(*e.args[0], scope);
      const bool r = call_test(e.name, operand, eval_args(e, 1, scope));
      return Value(e.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      const Value v = eval(*e.args[0], scope);
      if (e.name == "not") return Value(!truthy(v));
      if (e.name == "-") return negate(v);
      require_defined(v);
      if (!v.is_number()) throw_type_error("bad operand type for unary +: '" + type_name(v) + "'");
      return v.is_bool() ? Value(v.as_int()) : v;
    }
    case ExprKind::kBinary: {
      const Value a = eval(*e.args[0], scope);
      if (e.name == "and") return truthy(a) ? eval(*e.args[1], scope) : a;
      if (e.name == "or") return truthy(a) ? a : eval(*e.args[1], scope);
      const Value b = eval(*e.args[1], scope);
      if (e.name == "~") return Value(to_str(a) + to_str(b));
      return binary_op(e.name, a, b);
    }
    case ExprKind::kCompare: return eval_compare(e, scope);
    case ExprKind::kCond: {
      if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value k = eval(*e.args[i], scope);
        d.mutable_dict_data().set(k, eval(*e.args[i + 1], scope));
      }
      return d;
    }
  }
  return Value();
}

}  // namespace rlm::jinja
