// Tree-walking evaluator behind Template::render. Scoping follows jinja2: every for-loop
// iteration, macro call and block-set body gets a fresh child scope (assignments inside do not
// leak out), `if` does not; namespace() objects are shared by reference.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace rlm::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
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
};

}  // namespace rlm::jinja
