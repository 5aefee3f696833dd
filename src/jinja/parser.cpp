#include "jinja/parser.h"

#include <cstdlib>
#include <optional>
#include <set>

#include "jinja/filters.h"
#include "jinja/tests.h"

namespace rlm::jinja {
namespace {

struct ParseError {
  int line;
  int column;
  std::string message;
};

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData: return "template data";
    case TokenType::kVarBegin: return "'{{'";
    case TokenType::kVarEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "'" + t.value + "'";
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOperator: return "'" + t.value + "'";
    case TokenType::kEof: return "end of template";
    case TokenType::kError: return "invalid token";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  NodeList parse_root() {
    std::string end;
    NodeList body = parse_body({}, &end, "");
    // jinja2 reports unknown filters/tests when compiling, i.e. after every syntax error.
    if (unknown_name_) throw *unknown_name_;
    return body;
  }

 private:
  const Token& cur() const {
    const Token& t = toks_[pos_];
    if (t.type == TokenType::kError) throw ParseError{t.line, t.column, t.value};
    return t;
  }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const Token& t, const std::string& message) const {
    throw ParseError{t.line, t.column, message};
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur(), std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect(TokenType type, const char* what) {
    if (cur().type != type) fail(cur(), std::string("expected ") + what + ", got " + describe(cur()));
    advance();
  }
  void expect_block_end() { expect(TokenType::kBlockEnd, "end of statement block"); }
  // The `%}` before a block body; jinja2 accepts a Python-style colon first (`{% if x: %}`).
  void expect_body_start() {
    skip_op(":");
    expect_block_end();
  }
  // Problems jinja2 would only find when compiling (unknown filters/tests) and constructs we do
  // not run: reported once the whole template has parsed, so real syntax errors come first.
  void note_unknown(const Token& at, const std::string& message) {
    if (!unknown_name_) unknown_name_ = ParseError{at.line, at.column, message};
  }
  void note_unsupported(const Token& at, const std::string& message) { note_unknown(at, message); }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail(cur(), "expected a name, got " + describe(cur()));
    std::string name = cur().value;
    advance();
    return name;
  }

  template <typename T>
  std::unique_ptr<T> make(const Token& at) {
    auto n = std::make_unique<T>();
    n->line = at.line;
    n->column = at.column;
    return n;
  }
  ExprPtr make_expr(ExprKind kind, const Token& at) {
    auto e = make<Expr>(at);
    e->kind = kind;
    return e;
  }
  NodePtr make_node(NodeKind kind, const Token& at) {
    auto n = make<Node>(at);
    n->kind = kind;
    return n;
  }

  // Parses nodes until a `{% name %}` with name in `end_tags`; leaves the stream after that name.
  NodeList parse_body(const std::set<std::string>& end_tags, std::string* which_end, const std::string& opener) {
    NodeList body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (end_tags.empty()) return body;
        std::string wanted;
        for (const auto& tag : end_tags) wanted += (wanted.empty() ? "'" : " or '") + tag + "'";
        fail(t, "Unexpected end of template. Jinja was looking for the following tags: " + wanted +
                    ". The innermost block that needs to be closed is '" + opener + "'.");
      }
      if (t.type == TokenType::kData) {
        auto n = make_node(NodeKind::kText, t);
        n->text = t.value;
        body.push_back(std::move(n));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        advance();
        auto n = make_node(NodeKind::kOutput, t);
        n->expr = parse_tuple(true, false);
        expect(TokenType::kVarEnd, "end of print statement");
        body.push_back(std::move(n));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& name = peek();
        if (name.type != TokenType::kName) fail(name, "tag name expected");
        if (end_tags.count(name.value)) {
          *which_end = name.value;
          advance();
          advance();
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement() {
    DepthGuard guard(this);
    const Token& t = cur();
    const std::string& tag = t.value;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "generation") {
      auto n = make_node(NodeKind::kScope, t);
      advance();
      expect_body_start();
      std::string end;
      n->body = parse_body({"endgeneration"}, &end, "generation");
      expect_block_end();
      return n;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(t, "'" + tag + "' outside of a loop");
      auto n = make_node(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, t);
      advance();
      expect_block_end();
      return n;
    }
    if (tag == "with") return parse_with();
    static const std::set<std::string> kUnsupported = {"extends", "block", "include", "import", "from",
                                                      "autoescape", "do", "trans", "pluralize"};
    if (kUnsupported.count(tag)) fail(t, "the '" + tag + "' tag is not supported in chat templates");
    fail(t, "Encountered unknown tag '" + tag + "'.");
  }

  std::vector<std::string> parse_targets(bool allow_tuple) {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    names.push_back(expect_name());
    while (allow_tuple && skip_op(",")) {
      if (cur().type != TokenType::kName) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for() {
    auto n = make_node(NodeKind::kFor, cur());
    advance();
    n->targets = parse_targets(true);
    if (!skip_name("in")) fail(cur(), "expected 'in', got " + describe(cur()));
    n->expr = parse_tuple(false, false, "recursive");
    if (skip_name("if")) n->cond = parse_expression(true);
    if (is_name("recursive")) {
      note_unsupported(cur(), "recursive for loops are not supported");
      advance();
    }
    expect_body_start();
    ++loop_depth_;
    std::string end;
    n->body = parse_body({"endfor", "else"}, &end, "for");
    --loop_depth_;
    if (end == "else") {
      expect_body_start();
      n->else_body = parse_body({"endfor"}, &end, "for");
    }
    expect_block_end();
    return n;
  }

  NodePtr parse_if() {
    auto n = make_node(NodeKind::kIf, cur());
    advance();
    while (true) {
      ExprPtr cond = parse_tuple(false, false);
      expect_body_start();
      std::string end;
      NodeList body = parse_body({"elif", "else", "endif"}, &end, "if");
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        expect_body_start();
        n->else_body = parse_body({"endif"}, &end, "if");
      }
      expect_block_end();
      return n;
    }
  }

  NodePtr parse_set() {
    const Token& at = cur();
    advance();
    std::string ns_name, ns_attr;
    std::vector<std::string> targets;
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == ".") {
      ns_name = expect_name();
      advance();
      ns_attr = expect_name();
    } else {
      targets = parse_targets(true);
    }
    if (skip_op("=")) {
      auto n = make_node(NodeKind::kSet, at);
      n->targets = std::move(targets);
      n->attr_target = ns_name;
      n->text = ns_attr;
      n->expr = parse_tuple(true, false);
      expect_block_end();
      return n;
    }
    auto n = make_node(NodeKind::kSetBlock, at);
    if (ns_name.empty() && targets.size() != 1) fail(at, "a block assignment needs a single target");
    n->targets = std::move(targets);
    n->attr_target = ns_name;
    n->text = ns_attr;
    if (is_op("|")) n->expr = parse_filter(nullptr, false);
    expect_body_start();
    std::string end;
    n->body = parse_body({"endset"}, &end, "set");
    expect_block_end();
    return n;
  }

  void parse_signature(Node* n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n->params.empty()) expect_op(",");
      if (is_op(")")) break;
      n->params.push_back(expect_name());
      n->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
    }
    expect_op(")");
  }

  NodePtr parse_macro() {
    auto n = make_node(NodeKind::kMacro, cur());
    advance();
    n->text = expect_name();
    parse_signature(n.get());
    expect_body_start();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    n->body = parse_body({"endmacro"}, &end, "macro");
    loop_depth_ = saved;
    expect_block_end();
    return n;
  }

  NodePtr parse_call_block() {
    auto n = make_node(NodeKind::kCallBlock, cur());
    advance();
    if (is_op("(")) parse_signature(n.get());
    n->expr = parse_expression(true);
    if (n->expr->kind != ExprKind::kCall) fail(cur(), "expected a call after 'call'");
    expect_body_start();
    std::string end;
    n->body = parse_body({"endcall"}, &end, "call");
    expect_block_end();
    return n;
  }

  NodePtr parse_with() {
    auto n = make_node(NodeKind::kWith, cur());
    advance();
    while (cur().type != TokenType::kBlockEnd) {
      if (!n->params.empty()) expect_op(",");
      n->params.push_back(expect_name());
      expect_op("=");
      n->defaults.push_back(parse_expression(true));
    }
    expect_body_start();
    std::string end;
    n->body = parse_body({"endwith"}, &end, "with");
    expect_block_end();
    return n;
  }

  NodePtr parse_filter_block() {
    auto n = make_node(NodeKind::kFilterBlock, cur());
    advance();
    n->expr = parse_filter(nullptr, true);
    expect_body_start();
    std::string end;
    n->body = parse_body({"endfilter"}, &end, "filter");
    expect_block_end();
    return n;
  }

  // ---- expressions ------------------------------------------------------------------------

  bool is_tuple_end(const char* extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kOperator && t.value == ")") return true;
    return extra_end && t.type == TokenType::kName && t.value == extra_end;
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, const char* extra_end = nullptr) {
    const Token& at = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur(), "Expected an expression, got " + describe(cur()));
    }
    auto e = make_expr(ExprKind::kTuple, at);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Token& at = cur();
      advance();
      ExprPtr cond = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      auto e = make_expr(ExprKind::kCond, at);
      e->args.push_back(std::move(expr));
      e->args.push_back(std::move(cond));
      e->args.push_back(std::move(otherwise));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr l, ExprPtr r) {
    auto e = make_expr(ExprKind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      advance();
      left = binary(at, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      advance();
      left = binary(at, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto e = make_expr(ExprKind::kUnary, cur());
      advance();
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    while (true) {
      if (cur().type == TokenType::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
           cur().value == ">" || cur().value == ">=")) {
        ops.push_back(cur().value);
        advance();
      } else if (is_name("in")) {
        ops.push_back("in");
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        ops.push_back("notin");
        advance();
        advance();
      } else {
        break;
      }
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make_expr(ExprKind::kCompare, at);
    e->ops = std::move(ops);
    e->args.push_back(std::move(first));
    for (auto& r : rest) e->args.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      const std::string op = at.value;
      advance();
      left = binary(at, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& at = cur();
      advance();
      left = binary(at, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      const std::string op = at.value;
      advance();
      left = binary(at, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      advance();
      left = binary(at, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make_expr(ExprKind::kUnary, cur());
      node->name = cur().value;
      advance();
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  // Bounds recursion so hostile templates fail cleanly instead of overflowing the stack.
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->fail(p_->cur(), "template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };
  static constexpr int kMaxDepth = 200;

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token& t = cur();
    if (t.type == TokenType::kName) {
      advance();
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        auto e = make_expr(ExprKind::kLiteral, t);
        e->value = Value(t.value[0] == 't' || t.value[0] == 'T');
        return e;
      }
      if (t.value == "none" || t.value == "None") {
        auto e = make_expr(ExprKind::kLiteral, t);
        e->value = Value::none();
        return e;
      }
      auto e = make_expr(ExprKind::kName, t);
      e->name = t.value;
      return e;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().value;
        advance();
      }
      auto e = make_expr(ExprKind::kLiteral, t);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto e = make_expr(ExprKind::kLiteral, t);
      if (t.type == TokenType::kInteger) {
        errno = 0;
        const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(t, "integer literal out of range");
        e->value = Value(static_cast<int64_t>(v));
      } else {
        e->value = Value(std::strtod(t.value.c_str(), nullptr));
      }
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make_expr(ExprKind::kList, t);
      advance();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = make_expr(ExprKind::kDict, t);
      advance();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        const Token& at = cur();
        advance();
        if (cur().type == TokenType::kName) {
          auto e = make_expr(ExprKind::kGetAttr, at);
          e->name = cur().value;
          e->args.push_back(std::move(node));
          advance();
          node = std::move(e);
        } else if (cur().type == TokenType::kInteger) {
          auto e = make_expr(ExprKind::kGetItem, at);
          auto idx = make_expr(ExprKind::kLiteral, cur());
          idx->value = Value(static_cast<int64_t>(std::strtoll(cur().value.c_str(), nullptr, 10)));
          advance();
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(idx));
          node = std::move(e);
        } else {
          fail(cur(), "expected name or number after '.'");
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& at = cur();
    advance();  // [
    ExprPtr parts[3];
    bool is_slice = false;
    if (is_op("]") || is_op(",")) {  // x[] / x[, ...]: jinja2 indexes with a tuple
      parts[0] = parse_subscript_tuple(at, nullptr);
      expect_op("]");
      auto e = make_expr(ExprKind::kGetItem, at);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    if (!is_op(":")) parts[0] = parse_expression(true);
    if (skip_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":") && !is_op(",")) parts[1] = parse_expression(true);
      if (skip_op(":") && !is_op("]") && !is_op(",")) parts[2] = parse_expression(true);
    }
    if (is_op(",")) {
      if (is_slice) note_unsupported(cur(), "slices inside tuple subscripts are not supported");
      parts[0] = parse_subscript_tuple(at, std::move(parts[0]));
    }
    expect_op("]");
    auto e = make_expr(is_slice ? ExprKind::kSlice : ExprKind::kGetItem, at);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(parts[0]));
    if (is_slice) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return e;
  }

  // The rest of `[a, b, ...]` (first already parsed, or null for `[]`).
  ExprPtr parse_subscript_tuple(const Token& at, ExprPtr first) {
    auto t = make_expr(ExprKind::kTuple, at);
    if (first) t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_op("]")) break;
      t->args.push_back(parse_expression(true));
    }
    return t;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) {
        note_unsupported(cur(), "*args / **kwargs in calls are not supported");
        advance();
        parse_expression(true);
        continue;
      }
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail(cur(), "positional argument follows keyword argument");
        e->args.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make_expr(ExprKind::kCall, cur());
    e->args.push_back(std::move(node));
    parse_call_args(e.get());
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().type == TokenType::kName) {
      advance();
      name += "." + expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      const Token& at = cur();
      auto e = make_expr(ExprKind::kFilter, at);
      e->name = parse_dotted_name();
      if (!has_filter(e->name)) note_unknown(at, "No filter named '" + e->name + "'.");
      e->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    advance();  // is
    const bool negated = skip_name("not");
    const Token& at = cur();
    auto e = make_expr(ExprKind::kTest, at);
    e->name = parse_dotted_name();
    e->negated = negated;
    if (!has_test(e->name)) note_unknown(at, "No test named '" + e->name + "'.");
    e->args.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                t.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !(t.type == TokenType::kName && (t.value == "else" || t.value == "or" || t.value == "and"))) {
      if (is_name("is")) fail(t, "You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
  std::optional<ParseError> unknown_name_;
};

}  // namespace

StatusOr<NodeList> parse_template(std::string_view source, const LexerOptions& options) {
  try {
    Parser parser(tokenize(source, options));
    return parser.parse_root();
  } catch (const ParseError& e) {
    return invalid_argument("template syntax error at line " + std::to_string(e.line) + ", column " +
                            std::to_string(e.column) + ": " + e.message);
  }
}

}  // namespace rlm::jinja
