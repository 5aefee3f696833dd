#include "server/tool_grammar.h"

namespace rlm {

namespace {

using ojson = nlohmann::ordered_json;

ojson const_string(const std::string& value) { return {{"type", "const_string"}, {"value", value}}; }

ojson sequence(ojson elements) { return {{"type", "sequence"}, {"elements", std::move(elements)}}; }

// A JSON value in the structural tag, at most one whitespace character between its tokens (a
// model that likes spaces cannot pad forever).
ojson json_value(ojson schema) {
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}, {"max_whitespace_cnt", 1}};
}

// The tool's parameter schema (an object of anything when it has none).
ojson parameters(const ojson& tool) {
  const ojson& fn = tool["function"];
  if (fn.contains("parameters") && fn["parameters"].is_object()) return fn["parameters"];
  return {{"type", "object"}};
}

// {"name": <the name>, <args_key>: <the parameters>} as a JSON schema.
ojson call_object(const ojson& tool, const char* args_key) {
  ojson props = ojson::object();
  props["name"] = {{"const", tool["function"]["name"]}};
  props[args_key] = parameters(tool);
  return {{"type", "object"},
          {"properties", std::move(props)},
          {"required", ojson::array({"name", args_key})},
          {"additionalProperties", false}};
}

// One call of `tool` as the parser of `format` reads it.
StatusOr<ojson> call_format(ToolFormat format, const ojson& tool) {
  switch (format) {
    case ToolFormat::kHermes:
      return sequence({const_string("<tool_call>\n"), json_value(call_object(tool, "arguments")),
                       const_string("\n</tool_call>")});
    case ToolFormat::kLlama3Json:
      return json_value(call_object(tool, "parameters"));
    case ToolFormat::kMistral:
      return sequence({const_string("[TOOL_CALLS]["), json_value(call_object(tool, "arguments")), const_string("]")});
    case ToolFormat::kQwen3Coder:
      // xgrammar's Qwen XML parameters admit whitespace around each raw value (at least one
      // character's worth), which this parser keeps as part of the value: no exact grammar.
    case ToolFormat::kPythonic:
    case ToolFormat::kNone:
      break;
  }
  return invalid_argument(str("'tool_choice' \"required\" or a named function needs a tool-call parser with JSON "
                              "arguments (hermes, llama3_json, mistral); this server's is '",
                              tool_format_name(format), "'"));
}

}  // namespace

StatusOr<std::string> tool_call_structural_tag(ToolFormat format, const ojson& tools, const std::string& function) {
  ojson choices = ojson::array();
  for (const ojson& tool : tools) {
    if (!function.empty() && tool["function"]["name"] != function) continue;
    StatusOr<ojson> call = call_format(format, tool);
    if (!call.is_ok()) return call.status();
    choices.push_back(std::move(*call));
  }
  if (choices.empty()) return invalid_argument(str("no tool named '", function, "'"));
  ojson format_json = choices.size() == 1 ? std::move(choices[0]) : ojson{{"type", "or"}, {"elements", std::move(choices)}};
  return ojson{{"type", "structural_tag"}, {"format", std::move(format_json)}}.dump();
}

}  // namespace rlm
