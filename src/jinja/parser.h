// Builds the syntax tree from lexer tokens with jinja2's grammar and operator precedence.
// Everything the interpreter does not support is rejected here, at template load, with the line
// and column of the offending token: unknown tags, filters and tests, `extends`/`include`/
// `import`, recursive loops, `*args` calls.
#pragma once

#include <string_view>

#include "core/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace rlm::jinja {

StatusOr<NodeList> parse_template(std::string_view source, const LexerOptions& options);

}  // namespace rlm::jinja
