#include "jinja/template.h"

#include "jinja/interpreter.h"
#include "jinja/parser.h"

namespace rlm::jinja {

StatusOr<Template> Template::parse(std::string_view source, const LexerOptions& options) {
  StatusOr<NodeList> nodes = parse_template(source, options);
  if (!nodes.is_ok()) return nodes.status();
  return Template(std::make_shared<const NodeList>(std::move(nodes).value()));
}

StatusOr<std::string> Template::render(const Value& context, const RenderOptions& options) const {
  if (!context.is_dict()) return invalid_argument("template context must be a dict");
  Interpreter interp(options);
  try {
    return interp.render(*nodes_, context);
  } catch (const RenderError& e) {
    if (e.kind() == RenderError::Kind::kRaised) return invalid_argument(e.what());
    return invalid_argument(std::string(e.kind_name()) + ": " + e.what() + " (template line " +
                            std::to_string(interp.current_line()) + ")");
  }
}

}  // namespace rlm::jinja
