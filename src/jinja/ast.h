// Syntax tree of a parsed template. Nodes are plain structs; the interpreter switches on `kind`.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace rlm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,   // value
  kName,      // name
  kGetAttr,   // args[0].name
  kGetItem,   // args[0][args[1]]
  kSlice,     // args[0][args[1]:args[2]:args[3]] (null = omitted)
  kCall,      // args[0](args[1..], kwargs)
  kFilter,    // args[0] | name(args[1..], kwargs); args[0] is null inside {% filter %} blocks
  kTest,      // args[0] is [not] name(args[1..], kwargs)
  kUnary,     // op args[0]: "-", "+", "not"
  kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
  kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
  kCond,      // args[0] if args[1] else args[2] (args[2] null = undefined)
  kList,      // [args...]
  kTuple,     // (args...)
  kDict,      // {args[0]: args[1], ...}
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value value;                    // kLiteral
  std::string name;               // kName, kGetAttr, kFilter, kTest; operator for kUnary/kBinary
  std::vector<std::string> ops;   // kCompare
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;           // kTest: `is not`
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

enum class NodeKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (cond, body) ...; else_body
  kFor,          // targets in expr [if cond]: body; else_body
  kSet,          // targets = expr, or attr_target.attr = expr
  kSetBlock,     // {% set name %}body{% endset %} (expr = optional filter chain; or attr_target.text)
  kMacro,        // name(params = defaults) body
  kCallBlock,    // {% call(params) expr %}body{% endcall %}
  kFilterBlock,  // {% filter expr %}body{% endfilter %}
  kScope,        // body rendered in place ({% generation %} from transformers)
  kWith,         // {% with params[i] = defaults[i], ... %}body{% endwith %}
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind;
  int line = 0;
  int column = 0;
  std::string text;                                   // kText; macro name; set attribute name
  ExprPtr expr;                                        // output / set value / for iterable / call
  ExprPtr cond;                                        // for-loop filter
  std::vector<std::string> targets;                    // for / set / set-block targets
  std::string attr_target;                             // `set ns.attr`: the namespace variable
  std::vector<std::pair<ExprPtr, NodeList>> branches;  // if / elif
  NodeList body;
  NodeList else_body;
  std::vector<std::string> params;                     // macro / call-block parameters
  std::vector<ExprPtr> defaults;                       // aligned with params (null = required)
  bool recursive = false;
};

}  // namespace rlm::jinja
