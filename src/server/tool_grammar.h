// tool_choice "required" and a named function, by constrained decoding: a structural tag
// (grammar/grammar.h, GrammarKind::kStructuralTag) whose every output is one call in the format the
// active tool-call parser reads (server/output_parser.h), with arguments valid against the tool's
// parameter schema. The parser then turns the output into OpenAI tool_calls as for any call.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "server/output_parser.h"

namespace rlm {

// The structural tag (JSON text) for one call of `function` among `tools` (OpenAI's tools array,
// validated by the request parser), or of any of them when `function` is empty. kInvalidArgument
// for a format without JSON arguments (qwen3_coder's raw XML values, pythonic, none).
StatusOr<std::string> tool_call_structural_tag(ToolFormat format, const nlohmann::ordered_json& tools,
                                               const std::string& function);

}  // namespace rlm
