// Public entry point of the Jinja-subset interpreter: parse once (all syntax errors surface here,
// with line and column), render many times against a context of variables.
//
//   RLM_ASSIGN_OR_RETURN(auto t, jinja::Template::parse(source));
//   RLM_ASSIGN_OR_RETURN(std::string s, t.render(jinja::Value::dict({{"name", "x"}})));
//
// Semantics follow Python jinja2 3.1 as transformers configures it for chat templates:
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), loopcontrols, and the
// globals raise_exception, strftime_now, namespace, dict, range plus the `tojson` override.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/value.h"

namespace rlm::jinja {

struct RenderOptions {
  // The clock behind strftime_now(); local time when empty.
  std::function<std::tm()> now;
};

class Template {
 public:
  static StatusOr<Template> parse(std::string_view source, const LexerOptions& options = {});

  // `context` must be a dict; its entries become template variables (shadowing the globals).
  // Errors are kInvalidArgument: a raise_exception(msg) call gives exactly `msg`; other failures
  // give "<PythonErrorType>: <message> (template line N)".
  StatusOr<std::string> render(const Value& context, const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const NodeList> nodes) : nodes_(std::move(nodes)) {}
  std::shared_ptr<const NodeList> nodes_;
};

}  // namespace rlm::jinja
