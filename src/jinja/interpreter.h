// Tree-walking evaluator behind Template::render. Scoping follows jinja2: every for-loop
// iteration, macro call and block-set body gets a fresh child scope (assignments inside do not
// leak out), `if` does not; namespace() objects are shared by reference.
//
// Lifetimes: a macro needs the scope it was defined in, and that scope usually stores the macro.
// Macros therefore hold only a weak reference to it; the Interpreter keeps every scope a macro
// captured alive until the render ends (a macro may be called from anywhere until then, e.g. after
// being stored in a namespace), so a render leaves no reference cycle behind.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.h"
#include "jinja/template.h"
#include "jinja/value.h"

namespace rlm::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) { ++live_; }
  ~Scope() { --live_; }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }
  // Scopes alive in this process (all renders): back to its old value once a render has ended.
  static int64_t live_count() { return live_; }

 private:
  static inline std::atomic<int64_t> live_{0};
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : options_(options) {}

  // Throws RenderError; `current_line()` tells where.
  std::string render(const NodeList& nodes, const Value& context);
  int current_line() const { return line_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_list(const NodeList& nodes, const ScopePtr& scope, std::string& out);
  Flow exec(const Node& node, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Node& node, const ScopePtr& scope, std::string& out);
  void exec_set(const Node& node, const ScopePtr& scope);
  // `set ns.attr = v`: only namespace() objects accept attribute assignment.
  void assign_attribute(const Node& node, Value v, const Scope& scope);
  Value make_macro(const Node& node, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value apply_filters(const Expr& e, const Value& innermost, const ScopePtr& scope);
  CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope);
  void bind_targets(const std::vector<std::string>& targets, const Value& value, Scope& scope);

  RenderOptions options_;
  int line_ = 0;
  int depth_ = 0;  // macro recursion depth
  std::vector<ScopePtr> macro_scopes_;  // scopes macros were defined in, alive until the render ends
};

}  // namespace rlm::jinja
